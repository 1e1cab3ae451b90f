package apisim

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// newCertificates makes a throwaway ECDSA CA and a leaf for hosts signed by
// it. Clients must trust the CA (CertPool or the PEM), exactly as an
// operator configures api.ca_file, so the client's custom-roots path is
// exercised rather than InsecureSkipVerify.
func newCertificates(hosts []string, now time.Time) (tls.Certificate, []byte, *x509.CertPool, error) {
	ca, caKey, err := newCA(now)
	if err != nil {
		return tls.Certificate{}, nil, nil, err
	}
	return leafFor(ca, caKey, hosts, now)
}

// keptCertificates is newCertificates with the CA kept in dir (ca.pem and
// ca-key.pem): read when both are there, written when neither is, so that
// a simulator restarted on dir is trusted by the same ca_file.
func keptCertificates(dir string, hosts []string, now time.Time) (tls.Certificate, []byte, *x509.CertPool, error) {
	certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	certPEM, cerr := os.ReadFile(certFile)
	keyPEM, kerr := os.ReadFile(keyFile)
	if cerr == nil && kerr == nil {
		// A pair that does not parse or match (a start without KeepCA wrote
		// a new ca.pem), or a CA about to expire, is replaced.
		if ca, caKey, err := parseCA(certPEM, keyPEM); err == nil && now.Before(ca.NotAfter.Add(-24*time.Hour)) {
			return leafFor(ca, caKey, hosts, now)
		}
	}
	ca, caKey, err := newCA(now)
	if err != nil {
		return tls.Certificate{}, nil, nil, err
	}
	der, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		return tls.Certificate{}, nil, nil, err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return tls.Certificate{}, nil, nil, err
	}
	return leafFor(ca, caKey, hosts, now)
}

func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("not a PEM certificate and key")
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	if !key.PublicKey.Equal(ca.PublicKey) {
		return nil, nil, errors.New("the key is not the certificate's")
	}
	return ca, key, nil
}

// newCA makes a CA valid from an hour before now for 90 days.
func newCA(now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "splatd apisim CA", Organization: []string{"splatd"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(90 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	return ca, caKey, err
}

// leafFor makes a leaf for hosts signed by ca, and returns it with the
// CA's PEM and a pool of it.
func leafFor(ca *x509.Certificate, caKey *ecdsa.PrivateKey, hosts []string, now time.Time) (tls.Certificate, []byte, *x509.CertPool, error) {
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, nil, err
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "splatd apisim", Organization: []string{"splatd"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     ca.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		if seen[h] {
			continue
		}
		seen[h] = true
		if ip := net.ParseIP(h); ip != nil {
			leafTmpl.IPAddresses = append(leafTmpl.IPAddresses, ip)
		} else {
			leafTmpl.DNSNames = append(leafTmpl.DNSNames, h)
		}
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, nil, err
	}
	cert := tls.Certificate{Certificate: [][]byte{leafDER, ca.Raw}, PrivateKey: leafKey}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	return cert, caPEM, pool, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err)
	}
	return n
}
