package certificate

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/util/certificate"
)

// fileStore is client-go's certificate.FileStore (the kubelet's store: <prefix>-<timestamp>.pem and a
// <prefix>-current.pem link) with what it lacks when the disk is full or the directory unwritable:
//
//   - a failed Update removes the <prefix>-<timestamp>.pem it left behind (client-go ignores the
//     errors of its PEM writes, so a full disk leaves an empty file and reports "failed to find any
//     PEM data"), and the error says why, from a write of the same data that checks its errors
//     (e.g. "no space left on device");
//   - the issued pair is kept in memory and returned to client-go's manager as stored, so that the
//     certificate the signer issued is used at once and no new CSR is made for it; Persist writes it
//     again (Manager.run calls it every check period) until it is stored. Until then Current answers
//     the in-memory pair, and a restart has to bootstrap again.
type fileStore struct {
	certificate.FileStore
	dir string
	// failed is called on each failed write (the store reason of the errors metric); may be nil.
	failed func()

	writeMu sync.Mutex // serializes writes: Persist never stores a pair older than one Update stored

	mu               sync.Mutex
	unsaved          *tls.Certificate // issued, not stored yet
	unsavedCert      []byte
	unsavedKey       []byte
	err              error // why unsaved is not stored
	storedAfterError bool  // set when a pair kept in memory was stored; read by takeStored
}

func newFileStore(dir, certFile, keyFile string) (*fileStore, error) {
	fs, err := certificate.NewFileStore(PairNamePrefix, dir, dir, certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &fileStore{FileStore: fs, dir: dir}, nil
}

// Current is the pair kept in memory if an issued one could not be stored, else the file store's.
func (s *fileStore) Current() (*tls.Certificate, error) {
	s.mu.Lock()
	c := s.unsaved
	s.mu.Unlock()
	if c != nil {
		return c, nil
	}
	return s.FileStore.Current()
}

// Update stores the pair. When it cannot be written but is a valid pair, it is kept in memory and
// returned without error (see fileStore); the error is then storeError's.
func (s *fileStore) Update(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	return s.update(certPEM, keyPEM)
}

func (s *fileStore) update(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	cert, err := s.write(certPEM, keyPEM)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		if s.unsaved != nil {
			s.storedAfterError = true
		}
		s.unsaved, s.unsavedCert, s.unsavedKey, s.err = nil, nil, nil, nil
		return cert, nil
	}
	pair, perr := tls.X509KeyPair(certPEM, keyPEM)
	if perr != nil {
		return nil, err // not a usable pair: let client-go's manager retry with a new CSR
	}
	if pair.Leaf == nil {
		if pair.Leaf, perr = x509.ParseCertificate(pair.Certificate[0]); perr != nil {
			return nil, err
		}
	}
	s.unsaved, s.err = &pair, err
	s.unsavedCert, s.unsavedKey = append([]byte(nil), certPEM...), append([]byte(nil), keyPEM...)
	return &pair, nil
}

// Persist writes the pair kept in memory, if any, again. It returns nil when nothing is left unsaved.
func (s *fileStore) Persist() error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	certPEM, keyPEM := s.unsavedCert, s.unsavedKey
	s.mu.Unlock()
	if certPEM == nil {
		return nil
	}
	_, _ = s.update(certPEM, keyPEM)
	return s.storeError()
}

// storeError is why the current pair is only in memory (nil if it is stored).
func (s *fileStore) storeError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unsaved == nil {
		return nil
	}
	return s.err
}

// takeStored reports, once, that a pair kept in memory has been stored since.
func (s *fileStore) takeStored() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	stored := s.storedAfterError
	s.storedAfterError = false
	return stored
}

// currentPair is the PEM of the current pair: the one kept in memory, else the current file's.
func (s *fileStore) currentPair() (certPEM, keyPEM []byte, err error) {
	s.mu.Lock()
	if s.unsavedCert != nil {
		defer s.mu.Unlock()
		return s.unsavedCert, s.unsavedKey, nil
	}
	s.mu.Unlock()
	data, err := os.ReadFile(s.CurrentPath())
	if err != nil {
		return nil, nil, err
	}
	certPEM, keyPEM = splitPair(data)
	return certPEM, keyPEM, nil
}

// write is client-go's Update; on failure it removes the pair files the attempt left and returns an
// error naming --cert-dir and the underlying cause.
func (s *fileStore) write(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	before := s.pairFiles()
	cert, err := s.FileStore.Update(certPEM, keyPEM)
	if err == nil {
		return cert, nil
	}
	if s.failed != nil {
		s.failed()
	}
	for name := range s.pairFiles() {
		if !before[name] {
			_ = os.Remove(filepath.Join(s.dir, name))
		}
	}
	if cause := s.checkWrite(append(append([]byte(nil), certPEM...), keyPEM...)); cause != nil {
		return nil, fmt.Errorf("storing the issued client certificate in --cert-dir %q: %w (client-go's file store: %v)", s.dir, cause, err)
	}
	return nil, fmt.Errorf("storing the issued client certificate in --cert-dir %q: %w", s.dir, err)
}

// checkWrite writes data to a temporary file in the store's directory, checking every error, and
// removes it: the cause client-go's store does not report.
func (s *fileStore) checkWrite(data []byte) error {
	f, err := os.CreateTemp(s.dir, ".store-check-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	return errors.Join(werr, serr, cerr)
}

// pairFiles are the names of the store's timestamped pair files (<prefix>-<timestamp>.pem).
func (s *fileStore) pairFiles() map[string]bool {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil
	}
	files := map[string]bool{}
	for _, e := range entries {
		n := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(n, PairNamePrefix+"-") || !strings.HasSuffix(n, ".pem") ||
			n == PairNamePrefix+"-current.pem" || n == PairNamePrefix+"-updated.pem" {
			continue
		}
		files[n] = true
	}
	return files
}

// moveAsideDamaged renames the store's current entry (the link, or whatever stands at its path) to
// <prefix>-current.pem.damaged-<UTC time>[-<n>], keeping it (and, for a link, what it points at) for
// the operator, and returns the new path. An earlier damaged entry is never overwritten.
func moveAsideDamaged(currentPath string, now time.Time) (string, error) {
	base := currentPath + ".damaged-" + now.UTC().Format("20060102T150405Z")
	for i := 0; i < 100; i++ {
		to := base
		if i > 0 {
			to = fmt.Sprintf("%s-%d", base, i)
		}
		if _, err := os.Lstat(to); !errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := os.Rename(currentPath, to); err != nil {
			return "", err
		}
		return to, nil
	}
	return "", fmt.Errorf("%s-1 to -99 all exist", base)
}
