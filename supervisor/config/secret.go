package config

import (
	"fmt"
	"strings"
)

// Password reads the etcd password from PasswordFile, the only place it is
// kept: it is never part of Config, so nothing that prints or logs a Config
// can leak it. One trailing newline (as editors and `echo` write) is not part
// of the password.
func (e Etcd) Password() (string, error) {
	if e.PasswordFile == "" {
		return "", nil
	}
	data, _, err := readLimited(e.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("read etcd password file: %w", err)
	}
	return trimPassword(data), nil
}

func trimPassword(data []byte) string {
	s := string(data)
	s = strings.TrimSuffix(s, "\n")
	return strings.TrimSuffix(s, "\r")
}
