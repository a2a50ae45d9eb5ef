//go:build linux

package datapath

// The benchmark harness (bpf/tests/bench.c) is test code: its object and
// bindings are generated into _test files, beside the executor's.
//
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -tags linux -target bpfel bench ../../bpf/tests/bench.c -- -I../../bpf/include -I/usr/include/x86_64-linux-gnu -Wall -Werror -mcpu=v3
