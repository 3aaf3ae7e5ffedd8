// Command pki writes the credentials of the test control plane into one directory: a CA,
// the API server's serving certificate, client certificates and kubeconfigs for the admin
// (group system:masters) and the controller manager, and the service-account signing key
// pair. Files that exist are kept, so running it again changes nothing.
//
// Usage: pki DIR https://127.0.0.1:PORT
//
//	pki ports N   prints N free loopback TCP ports, one per line
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// The first address of the service range the API server is started with.
const kubernetesServiceIP = "10.96.0.1"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "pki: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 2 && args[0] == "ports" {
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return fmt.Errorf("ports: %w", err)
		}
		return freePorts(n)
	}
	if len(args) != 2 {
		return errors.New("usage: pki DIR SERVER_URL | pki ports N")
	}
	return writeAll(args[0], args[1])
}

// freePorts holds n listeners open at once, so the ports are distinct, and prints them.
func freePorts(n int) error {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		listeners = append(listeners, l)
		fmt.Println(l.Addr().(*net.TCPAddr).Port)
	}
	return nil
}

func writeAll(dir, server string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, caKey, err := loadOrCreateCA(dir)
	if err != nil {
		return err
	}
	serving := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(kubernetesServiceIP)},
	}
	if err := leaf(dir, "apiserver", serving, ca, caKey); err != nil {
		return err
	}
	clients := []struct{ name, user, group string }{
		{"admin", "ne-test-admin", "system:masters"},
		{"controller-manager", "system:kube-controller-manager", ""},
	}
	for _, c := range clients {
		cert := &x509.Certificate{
			Subject:     pkix.Name{CommonName: c.user},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if c.group != "" {
			cert.Subject.Organization = []string{c.group}
		}
		if err := leaf(dir, c.name, cert, ca, caKey); err != nil {
			return err
		}
		if err := kubeconfig(dir, c.name, c.user, server); err != nil {
			return err
		}
	}
	return serviceAccountKeys(dir)
}

func loadOrCreateCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if exists(certPath) && exists(keyPath) {
		cert, err := readCert(certPath)
		if err != nil {
			return nil, nil, err
		}
		key, err := readKey(keyPath)
		if err != nil {
			return nil, nil, err
		}
		return cert, key, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	template := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "network-enforcer-test-ca"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := sign(template, template, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	if err := writeKey(keyPath, key); err != nil {
		return nil, nil, err
	}
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

// leaf writes NAME.crt and NAME.key signed by the CA, unless both exist.
func leaf(dir, name string, template, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	certPath, keyPath := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if exists(certPath) && exists(keyPath) {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	template.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := sign(template, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writeKey(keyPath, key); err != nil {
		return err
	}
	return writePEM(certPath, "CERTIFICATE", der, 0o644)
}

func sign(template, parent *x509.Certificate, pub *ecdsa.PublicKey, key *ecdsa.PrivateKey) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	template.SerialNumber = serial
	template.NotBefore = time.Now().Add(-time.Hour)
	template.NotAfter = time.Now().AddDate(10, 0, 0)
	return x509.CreateCertificate(rand.Reader, template, parent, pub, key)
}

// kubeconfig writes NAME.kubeconfig with the certificates embedded, so it can be copied.
func kubeconfig(dir, name, user, server string) error {
	path := filepath.Join(dir, name+".kubeconfig")
	if exists(path) {
		return nil
	}
	var data [3]string
	for i, file := range []string{"ca.crt", name + ".crt", name + ".key"} {
		bytes, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return err
		}
		data[i] = base64.StdEncoding.EncodeToString(bytes)
	}
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: network-enforcer-test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: network-enforcer-test
  context:
    cluster: network-enforcer-test
    user: %s
current-context: network-enforcer-test
`, server, data[0], user, data[1], data[2], user)
	return os.WriteFile(path, []byte(text), 0o600)
}

// serviceAccountKeys writes the key the API server signs tokens with (sa.key) and the
// public key it checks them with (sa.pub).
func serviceAccountKeys(dir string) error {
	keyPath, pubPath := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if exists(keyPath) && exists(pubPath) {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := writeKey(keyPath, key); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	return writePEM(pubPath, "PUBLIC KEY", pub, 0o644)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(path, kind string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), mode)
}

func readCert(path string) (*x509.Certificate, error) {
	block, err := readPEM(path)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(block.Bytes)
}

func readKey(path string) (*ecdsa.PrivateKey, error) {
	block, err := readPEM(path)
	if err != nil {
		return nil, err
	}
	return x509.ParseECPrivateKey(block.Bytes)
}

func readPEM(path string) (*pem.Block, error) {
	bytes, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(bytes)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM block", path)
	}
	return block, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
