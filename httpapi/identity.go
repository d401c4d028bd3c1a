package httpapi

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Who is calling. Without signed holders the Holder-Id header says who the holder is,
// and the service belongs behind a backend that sets it from its own session. With
// them (Options.HolderAuth), every holder-scoped request carries a JWT whose sub is
// the holder: a client can no longer be whoever it says, so the per-holder caps bind.

// HolderAuth verifies signed holders: `Authorization: Bearer <JWT>`, sub the holder,
// exp required. Its key is read from a file and read again when the file changes.
type HolderAuth struct {
	key *fileValue[holderKey]
}

// holderKey is a verification key and the one algorithm it is for: a token signed
// with another algorithm is refused (no algorithm confusion, no "none").
type holderKey struct {
	method jwt.SigningMethod
	key    any    // []byte for HS256, else a public key
	secret []byte // HS256 only: what the demo identity endpoint signs with
}

// minSecretBytes is the least HS256 secret: as long as the hash.
const minSecretBytes = 32

// maxTokenBytes bounds a token before it is parsed.
const maxTokenBytes = 4096

// HolderSecretFile verifies HS256 tokens with the secret in path (surrounding white
// space ignored; at least 32 bytes). onError hears of a changed file that does not
// parse (the last good secret stays).
func HolderSecretFile(path string, onError func(error)) (*HolderAuth, error) {
	v, err := newFileValue(func(c [][]byte) (holderKey, error) {
		secret := []byte(strings.TrimSpace(string(c[0])))
		if len(secret) < minSecretBytes {
			return holderKey{}, fmt.Errorf("the HS256 secret is %d bytes; it needs at least %d (for example: openssl rand -hex 32)", len(secret), minSecretBytes)
		}
		return holderKey{method: jwt.SigningMethodHS256, key: secret, secret: secret}, nil
	}, onError, path)
	if err != nil {
		return nil, err
	}
	return &HolderAuth{key: v}, nil
}

// HolderPublicKeyFile verifies tokens with the PEM public key in path: RSA (RS256, at
// least 2048 bits), ECDSA P-256 (ES256) or Ed25519 (EdDSA).
func HolderPublicKeyFile(path string, onError func(error)) (*HolderAuth, error) {
	v, err := newFileValue(func(c [][]byte) (holderKey, error) {
		block, _ := pem.Decode(c[0])
		if block == nil || block.Type != "PUBLIC KEY" {
			return holderKey{}, errors.New(`no PEM "PUBLIC KEY" block`)
		}
		pub, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return holderKey{}, err
		}
		switch k := pub.(type) {
		case *rsa.PublicKey:
			if k.N.BitLen() < 2048 {
				return holderKey{}, fmt.Errorf("the RSA key has %d bits; RS256 needs at least 2048", k.N.BitLen())
			}
			return holderKey{method: jwt.SigningMethodRS256, key: k}, nil
		case *ecdsa.PublicKey:
			if k.Curve != elliptic.P256() {
				return holderKey{}, errors.New("the ECDSA key is not on P-256 (ES256)")
			}
			return holderKey{method: jwt.SigningMethodES256, key: k}, nil
		case ed25519.PublicKey:
			return holderKey{method: jwt.SigningMethodEdDSA, key: k}, nil
		}
		return holderKey{}, fmt.Errorf("a %T key: want RSA, ECDSA P-256 or Ed25519", pub)
	}, onError, path)
	if err != nil {
		return nil, err
	}
	return &HolderAuth{key: v}, nil
}

// errTokenExpired and errTokenInvalid are what a client is told of a refused token.
var (
	errTokenExpired = errors.New("the holder token has expired")
	errTokenInvalid = errors.New("the holder token is not valid (signature, algorithm, sub or exp)")
)

// Verify returns the holder (sub) of a valid token.
func (a *HolderAuth) Verify(token string) (string, error) {
	if len(token) > maxTokenBytes {
		return "", errTokenInvalid
	}
	k := a.key.get()
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) { return k.key, nil },
		jwt.WithValidMethods([]string{k.method.Alg()}), jwt.WithExpirationRequired(), jwt.WithLeeway(5*time.Second))
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return "", errTokenExpired
	case err != nil:
		return "", errTokenInvalid
	}
	if claims.Subject == "" || len(claims.Subject) > maxHolderBytes {
		return "", errTokenInvalid
	}
	return claims.Subject, nil
}

// CanSign reports whether Sign works: with an HS256 secret, not with a public key.
func (a *HolderAuth) CanSign() bool { return a.key.get().secret != nil }

// Sign returns an HS256 token for holder, valid for ttl (the demo identity endpoint
// and tests use it; a real deployment's tokens come from its own identity provider).
func (a *HolderAuth) Sign(holder string, ttl time.Duration) (string, time.Time, error) {
	k := a.key.get()
	if k.secret == nil {
		return "", time.Time{}, errors.New("httpapi: a public key verifies tokens; it cannot sign them")
	}
	exp := time.Now().Add(ttl).Truncate(time.Second)
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject: holder, ExpiresAt: jwt.NewNumericDate(exp), IssuedAt: jwt.NewNumericDate(time.Now()),
	}).SignedString(k.secret)
	return tok, exp, err
}

// maxHolderBytes bounds a holder id (also the limiters' keys).
const maxHolderBytes = 128

// singleHeader reads a header that may be sent at most once: a second one is refused
// rather than one of them silently chosen.
func (s *Server) singleHeader(w http.ResponseWriter, r *http.Request, name string) (string, bool) {
	vs := r.Header.Values(name)
	if len(vs) > 1 {
		writeProblem(w, http.StatusBadRequest, "invalid-argument", "Invalid argument",
			name+": sent "+strconv.Itoa(len(vs))+" times; send it once")
		return "", false
	}
	if len(vs) == 0 {
		return "", true
	}
	return vs[0], true
}

// holder reads the caller's identity: the sub of a valid token with signed holders,
// else the Holder-Id header. A request without one is refused.
func (s *Server) holder(w http.ResponseWriter, r *http.Request) (string, bool) {
	h, ok := s.singleHeader(w, r, HolderHeader)
	if !ok {
		return "", false
	}
	if s.opts.HolderAuth != nil {
		authz, ok := s.singleHeader(w, r, "Authorization")
		if !ok {
			return "", false
		}
		tok, bearer := strings.CutPrefix(authz, "Bearer ")
		if !bearer || tok == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="holdfast"`)
			writeProblem(w, http.StatusUnauthorized, "unauthorized", "Unauthorized",
				"this route needs a signed holder: Authorization: Bearer <JWT>")
			return "", false
		}
		sub, err := s.opts.HolderAuth.Verify(tok)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="holdfast", error="invalid_token"`)
			writeProblem(w, http.StatusUnauthorized, "unauthorized", "Unauthorized", err.Error())
			return "", false
		}
		if h != "" && h != sub {
			writeProblem(w, http.StatusBadRequest, "holder-mismatch", "Holder mismatch",
				HolderHeader+" differs from the signed holder (the token's sub); send the same or leave it out")
			return "", false
		}
		return sub, true
	}
	if h == "" {
		writeProblem(w, http.StatusBadRequest, "missing-holder", "Missing holder", "the "+HolderHeader+" header is required")
		return "", false
	}
	if len(h) > maxHolderBytes {
		writeProblem(w, http.StatusBadRequest, "invalid-argument", "Invalid argument", HolderHeader+": at most 128 bytes")
		return "", false
	}
	return h, true
}

// demoIdentityTTL is how long a demo identity's token lasts.
const demoIdentityTTL = time.Hour

// postDemoIdentity gives the seat-map page a signed demo holder (serve --demo-show
// with an HS256 secret only): a fresh random id, few per address.
func (s *Server) postDemoIdentity(w http.ResponseWriter, r *http.Request) {
	if !s.demoIDs.allow(clientAddrOf(r)) {
		s.refuse(w, r, "demo-identity", "too many demo identities from this address")
		return
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	holder := "page-" + hex.EncodeToString(b)
	tok, exp, err := s.opts.HolderAuth.Sign(holder, demoIdentityTTL)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"holder": holder, "token": tok, "expires_at": exp.UTC()})
}

// operatorHash is the SHA-256 of the operator token now (the file's, read again when
// it changes), and false when there is none.
func (s *Server) operatorHash() ([32]byte, bool) {
	tok := s.opts.OperatorToken
	if s.opToken != nil {
		tok = s.opToken.get()
	}
	if tok == "" {
		return [32]byte{}, false
	}
	return sha256.Sum256([]byte(tok)), true
}

// operatorOnly guards an operator route: off (403) without a configured token, 401
// without the right bearer token. The right token is checked first and no limit ever
// refuses it: the operator may share an address (a NAT, a bastion) with whoever sends
// wrong ones. Wrong tokens are limited as reads are, and throttled per client address
// (OperatorFailures, then one per 10 s; 429 past that); each 401 is logged at warn with
// the address. The throttle bounds what guessing costs the server and its logs; what
// makes a guess hopeless is the token's length (16 characters at least).
func (s *Server) operatorOnly(fn http.HandlerFunc) http.HandlerFunc {
	wrong := s.reading(s.wrongOperatorToken)
	return func(w http.ResponseWriter, r *http.Request) {
		if _, on := s.operatorHash(); !on {
			writeProblem(w, http.StatusForbidden, "operator-routes-off", "Operator routes are off",
				"start holdfast serve with --operator-token-file, --operator-token or HOLDFAST_OPERATOR_TOKEN to create shows and resync over HTTP")
			return
		}
		if s.isOperator(r) {
			fn(w, r)
			return
		}
		wrong(w, r)
	}
}

// wrongOperatorToken answers a request without the right operator token: 429 once its
// address has spent its failures, else 401.
func (s *Server) wrongOperatorToken(w http.ResponseWriter, r *http.Request) {
	addr := clientAddrOf(r)
	if !s.opFailures.allow(addr) {
		s.refuse(w, r, "operator-failures", "too many wrong operator tokens from this address; wait")
		return
	}
	s.log.WarnContext(r.Context(), "operator token refused", "addr", addr, "route", r.Pattern)
	w.Header().Set("WWW-Authenticate", `Bearer realm="holdfast-operator"`)
	writeProblem(w, http.StatusUnauthorized, "unauthorized", "Unauthorized",
		"this route needs the operator token: Authorization: Bearer <token>")
}

// isOperator reports whether the request carries the operator token (compared in
// constant time, as hashes).
func (s *Server) isOperator(r *http.Request) bool {
	want, on := s.operatorHash()
	if !on {
		return false
	}
	vs := r.Header.Values("Authorization")
	if len(vs) != 1 || !strings.HasPrefix(vs[0], "Bearer ") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimPrefix(vs[0], "Bearer ")))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}
