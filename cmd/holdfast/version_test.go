package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestVersionIsTheNewestRelease: VERSION names the newest release of CHANGELOG.md (its
// first "## vX.Y.Z" heading; "Unreleased" is not one), so a release bumps both or fails
// here, and a build from a clone without tags still knows its version.
func TestVersionIsTheNewestRelease(t *testing.T) {
	t.Parallel()
	changelog, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^## (v[0-9]+\.[0-9]+\.[0-9]+[^ ]*)`).FindSubmatch(changelog)
	if m == nil {
		t.Fatal("CHANGELOG.md has no release heading (## vX.Y.Z — date)")
	}
	if got, want := strings.TrimSpace(releaseVersion), string(m[1]); got != want {
		t.Fatalf("cmd/holdfast/VERSION says %q, the newest release in CHANGELOG.md is %q: bump them together", got, want)
	}
	if !regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+\n$`).MatchString(releaseVersion) {
		t.Fatalf("cmd/holdfast/VERSION is %q, want one line vX.Y.Z", releaseVersion)
	}
}

// TestSourceVersion: a build says the release only when it is that release, and names
// the revision it was built from otherwise.
func TestSourceVersion(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		module, rev string
		dirty       bool
		want        string
	}{
		{"v0.1.0", "", false, "v0.1.0"},                 // go install …@v0.1.0: the module proxy's copy
		{"v0.1.0", "cb3993f00be6cc6a", false, "v0.1.0"}, // a clean checkout of the tag
		{"v0.0.0-20261203182426-cb3993f00be6", "cb3993f00be6cc6a8644bf9cd7bfecb961601290", false, "v0.1.0+dev.cb3993f00be6"}, // a clone without tags
		{"v0.1.0+dirty", "cb3993f00be6cc6a8644bf9cd7bfecb961601290", true, "v0.1.0+dev.cb3993f00be6.dirty"},
		{"(devel)", "", false, "v0.1.0"}, // -buildvcs=false, a tarball: VERSION alone
		{"", "", false, "v0.1.0"},        // a test binary
		{"v0.1.1-0.20261203182426-cb3993f00be6", "", false, "v0.1.1-0.20261203182426-cb3993f00be6"}, // fetched at a commit
	} {
		if got := sourceVersion("v0.1.0", c.module, c.rev, c.dirty); got != c.want {
			t.Errorf("module %q, revision %q, dirty %v: %q, want %q", c.module, c.rev, c.dirty, got, c.want)
		}
	}
}
