package main

import (
	_ "embed"
	"runtime"
	"runtime/debug"
	"strings"
)

// releaseVersion is the version of the source: the newest release in CHANGELOG.md
// (TestVersionIsTheNewestRelease), bumped with it. The Makefile reads the same file.
//
//go:embed VERSION
var releaseVersion string

// stampedVersion and stampedRevision are set by `make build` (-ldflags -X): the
// Makefile's reading of VERSION and git, for builds whose toolchain records neither
// (a build from a tarball, -buildvcs=false).
var stampedVersion, stampedRevision string

// version says what was built: the version, the source revision (with "+dirty" when
// the work tree had changes) and its time, and the Go version; a revision that is not
// known is called unknown.
func version() string {
	rev, at, dirty := "unknown", "", false
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = &debug.BuildInfo{GoVersion: runtime.Version()}
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	ver := sourceVersion(strings.TrimSpace(releaseVersion), info.Main.Version, rev, dirty)
	if stampedVersion != "" {
		ver = stampedVersion
	}
	if stampedRevision != "" {
		rev = stampedRevision
	} else if dirty {
		rev += "+dirty"
	}
	out := "holdfast " + ver + " (revision " + rev
	if at != "" {
		out += ", " + at
	}
	return out + ", " + info.GoVersion + ")"
}

// sourceVersion is the release when the build is that release (the module at its
// version, a checkout at its tag), and the release plus "+dev.<revision>" when it is
// built from a checkout after it; as the Makefile names a build. The toolchain's own
// version stands when there is no revision to name (a module fetched at a commit).
func sourceVersion(release, module, rev string, dirty bool) string {
	switch {
	case module == release:
		return release
	case rev != "" && rev != "unknown":
		v := release + "+dev." + rev[:min(12, len(rev))]
		if dirty {
			v += ".dirty"
		}
		return v
	case module != "" && module != "(devel)":
		return module
	}
	return release
}
