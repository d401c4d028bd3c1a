package httpapi

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// fileValue is a value read from files and read again when one of them changes (its
// size or modification time), checked at most once a second: the operator token, the
// holder-signing key and the TLS certificate rotate without a restart. A change that
// does not parse keeps the last good value (and is reported by onError).
type fileValue[T any] struct {
	paths   []string
	parse   func(contents [][]byte) (T, error)
	onError func(error)

	mu      sync.Mutex
	val     T
	stamp   string // sizes and modification times the value was read at
	checked time.Time
	lastErr string // reported once, not every second
}

// reloadEvery is how often a fileValue looks at its files.
const reloadEvery = time.Second

// newFileValue reads the files once; an error here is the caller's to report (a
// server does not start on a key it cannot read).
func newFileValue[T any](parse func([][]byte) (T, error), onError func(error), paths ...string) (*fileValue[T], error) {
	f := &fileValue[T]{paths: paths, parse: parse, onError: onError}
	stamp, err := f.stampNow()
	if err != nil {
		return nil, err
	}
	if err := f.load(stamp); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *fileValue[T]) stampNow() (string, error) {
	stamp := ""
	for _, p := range f.paths {
		st, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		stamp += fmt.Sprintf("%d:%d;", st.Size(), st.ModTime().UnixNano())
	}
	return stamp, nil
}

func (f *fileValue[T]) load(stamp string) error {
	contents := make([][]byte, len(f.paths))
	for i, p := range f.paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		contents[i] = b
	}
	v, err := f.parse(contents)
	if err != nil {
		return fmt.Errorf("%s: %w", f.paths[0], err)
	}
	f.val, f.stamp = v, stamp
	return nil
}

// get returns the current value, read again first if a file changed.
func (f *fileValue[T]) get() T {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now := time.Now(); now.Sub(f.checked) >= reloadEvery {
		f.checked = now
		stamp, err := f.stampNow()
		if err == nil && stamp != f.stamp {
			err = f.load(stamp)
		}
		switch {
		case err == nil:
			f.lastErr = ""
		case err.Error() != f.lastErr:
			f.lastErr = err.Error()
			if f.onError != nil {
				f.onError(err)
			}
		}
	}
	return f.val
}

// CertificateFiles serves a TLS certificate from a PEM chain and key, read again
// when either file changes (a renewed certificate needs no restart): set it as a
// tls.Config's GetCertificate. onError hears of a change that does not load.
func CertificateFiles(certFile, keyFile string, onError func(error)) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), error) {
	v, err := newFileValue(func(c [][]byte) (*tls.Certificate, error) {
		cert, err := tls.X509KeyPair(c[0], c[1])
		return &cert, err
	}, onError, certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return v.get(), nil }, nil
}
