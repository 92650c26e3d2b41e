# gosiw: a pure-Go software iWARP RNIC.
GO ?= go
PKGS := ./...

.PHONY: all build demo test test-short race lint fuzz stress bench interop clean tools

all: build

build:
	$(GO) build $(PKGS)

# The main job: start siwd on loopback, run siw ping and siw perf against
# it, show its metrics, stop it; then decode a real Linux siw capture.
demo:
	./scripts/demo.sh
	@echo; echo "== siw dump testdata/captures/crc-rping-default.pcap (a real Linux siw rping capture, CRC on)"
	$(GO) run ./cmd/siw dump testdata/captures/crc-rping-default.pcap

test:
	$(GO) vet $(PKGS)
	$(GO) test -count=1 $(PKGS)
	$(GO) test -count=1 -race $(PKGS)

lint: tools
	test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet $(PKGS)
	"$$($(GO) env GOPATH)/bin/staticcheck" $(PKGS)

tools:
	@test -x "$$($(GO) env GOPATH)/bin/staticcheck" || $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2

FUZZTIME ?= 2m
fuzz:
	./scripts/fuzz-all.sh $(FUZZTIME)

# The race suite 3 times with GOMAXPROCS=1 and 3 times beside a CPU hog
# the script starts and stops itself, then test/e2e beside the hog.
# STRESS=ci runs the bounded part .ci/run uses (see scripts/stress.sh).
stress:
	./scripts/stress.sh

# gosiw beside raw TCP (loopback, and a veth between two network
# namespaces when root), with the ratios; BENCHFLAGS adds flags, e.g.
# BENCHFLAGS='-links lo -count 3' (see go run ./test/bench -h).
bench:
	$(GO) run ./test/bench $(BENCHFLAGS)

# Interop with real Linux siw: build (once, cached) a qemu guest with siw and
# rdma-core, boot it, run the matrix, print a table. Needs root for apt.
interop:
	./test/interop/vm/ensure.sh
	cd test/interop && $(GO) test -tags interop -count=1 -v -timeout 30m -run TestInterop .

clean:
	$(GO) clean -testcache
