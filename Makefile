# gosiw: a pure-Go software iWARP RNIC.
GO ?= go
PKGS := ./...

.PHONY: all build demo test test-short race lint fuzz bench interop clean tools

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

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

clean:
	$(GO) clean -testcache
