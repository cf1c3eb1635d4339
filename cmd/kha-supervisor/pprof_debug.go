//go:build pprof

package main

// A debugging build only (go build -tags pprof): the heap and goroutine
// profiles on 127.0.0.1:6060. Never in a package: a heap profile can hold
// secrets (bearer tokens in flight through the API gates).

import (
	"net/http"
	_ "net/http/pprof"
)

func init() {
	go func() { _ = http.ListenAndServe("127.0.0.1:6060", nil) }()
}
