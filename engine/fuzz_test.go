package engine

import (
	"bytes"
	"strings"
	"testing"
)

// hashTag is the part of a key Redis Cluster hashes: between the first "{" and the first
// "}" after it, when that is not empty (the Redis Cluster specification).
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

// FuzzKeys: an accepted show and seat give keys whose hash tag is the show (one
// Cluster slot per show), and two accepted (show, seat) pairs never share a hold key.
func FuzzKeys(f *testing.F) {
	f.Add("concert-1", "A1", "concert-1", "A2")
	f.Add("a", "b.c", "a.b", "c")
	f.Add("s", "x:y", "s:x", "y")
	f.Add("show}", "{seat", "show", "seat")
	f.Add("Z", "hold", "Z", "gen")
	f.Fuzz(func(t *testing.T, show1, seat1, show2, seat2 string) {
		ok1 := validID(show1) && validID(seat1)
		ok2 := validID(show2) && validID(seat2)
		for _, s := range []string{show1, seat1, show2, seat2} {
			if validID(s) && strings.ContainsAny(s, "{}: ") {
				t.Fatalf("validID accepted %q", s)
			}
		}
		if !ok1 || !ok2 {
			return
		}
		k1, k2 := newKeys("holdfast", show1), newKeys("holdfast", show2)
		for _, key := range []string{k1.gen(), k1.sold(0), k1.sold(7), k1.hold(seat1), k1.holder(holderTag("h"))} {
			if hashTag(key) != show1 {
				t.Fatalf("key %q hashes on %q, not the show %q", key, hashTag(key), show1)
			}
		}
		same := show1 == show2 && seat1 == seat2
		if (k1.hold(seat1) == k2.hold(seat2)) != same {
			t.Fatalf("(%q,%q) and (%q,%q) give hold keys %q and %q", show1, seat1, show2, seat2, k1.hold(seat1), k2.hold(seat2))
		}
		if !same && show1 != show2 && k1.gen() == k2.gen() {
			t.Fatalf("two shows share a counter key %q", k1.gen())
		}
		for _, k := range []string{k1.gen(), k1.sold(0), k1.sold(12)} {
			if k == k1.hold(seat1) {
				t.Fatalf("hold key %q collides with a show key", k)
			}
		}
	})
}

// FuzzFingerprint: the fingerprint is deterministic and tells requests apart, even when
// their fields concatenate to the same text.
func FuzzFingerprint(f *testing.F) {
	f.Add("s1", "A1,A2", "t1", int64(1), "s1", "A1A2", "t1", int64(1))
	f.Add("s1A", "1", "tok", int64(12), "s1", "A1", "tok1", int64(2))
	f.Add("x", "", "", int64(0), "x", "", "", int64(0))
	f.Fuzz(func(t *testing.T, show1, seats1, tok1 string, gen1 int64, show2, seats2, tok2 string, gen2 int64) {
		s1, s2 := strings.Split(seats1, ","), strings.Split(seats2, ",")
		a, b := fingerprint(show1, s1, tok1, gen1), fingerprint(show2, s2, tok2, gen2)
		if !bytes.Equal(a, fingerprint(show1, s1, tok1, gen1)) {
			t.Fatal("fingerprint is not deterministic")
		}
		if len(a) != 32 {
			t.Fatalf("fingerprint of %d bytes", len(a))
		}
		same := show1 == show2 && seats1 == seats2 && tok1 == tok2 && gen1 == gen2
		if same != bytes.Equal(a, b) {
			t.Fatalf("requests %q/%q/%q/%d and %q/%q/%q/%d: equal=%v but fingerprints equal=%v",
				show1, seats1, tok1, gen1, show2, seats2, tok2, gen2, same, bytes.Equal(a, b))
		}
	})
}

// FuzzValidation: the validators never panic, and what they accept is what the Lua
// scripts and the SQL CHECK constraints accept.
func FuzzValidation(f *testing.F) {
	for _, s := range []string{"A1", "a.b-c_d", "", "-a", "a b", "{x}", "a:b", strings.Repeat("x", 64), strings.Repeat("x", 65), "é", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ok := validID(s)
		want := len(s) >= 1 && len(s) <= 64
		for i := 0; want && i < len(s); i++ {
			c := s[i]
			alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
			want = alnum || i > 0 && (c == '.' || c == '_' || c == '-')
		}
		if ok != want {
			t.Fatalf("validID(%q) = %v, want %v", s, ok, want)
		}
		_ = validateHolderID(s)
		_ = validateIdempotencyKey("key", s)
		if validToken(s) && (len(s) != 32 || strings.ToLower(s) != s) {
			t.Fatalf("validToken accepted %q", s)
		}
	})
}
