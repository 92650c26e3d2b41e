# gosiw: a pure-Go software iWARP RNIC.
GO ?= go
PKGS := ./...

.PHONY: all build demo test test-short race lint fuzz stress bench interop clean tools install install-check

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
	$(GO) mod tidy -diff
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

# gosiw beside the bare TCP a Go user would write (and iperf3 when
# installed), over loopback and a veth between two network namespaces
# when root, with the ratios and the idle-QP memory; BENCHFLAGS adds
# flags, e.g. BENCHFLAGS='-links lo -count 3 -profiledir prof' (see go
# run ./test/bench -h).
bench:
	$(GO) run ./test/bench $(BENCHFLAGS)

# Interop with real Linux siw: build (once, cached) a qemu guest with siw and
# rdma-core, boot it, run the matrix, print a table. Needs root for apt.
interop:
	./test/interop/vm/ensure.sh
	cd test/interop && $(GO) test -tags interop -count=1 -v -timeout 30m -run TestInterop .

# Install siw and siwd, the systemd unit, the example config (kept if one
# is there already), and the LICENSE and README in DOCDIR. PREFIX=/usr/local by default; DESTDIR stages the tree
# for packaging. The unit's paths are rewritten to match BINDIR and
# SYSCONFDIR. -buildvcs=auto stamps the VCS revision that --version prints.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
SYSCONFDIR ?= /etc
UNITDIR ?= $(PREFIX)/lib/systemd/system
DOCDIR ?= $(PREFIX)/share/doc/gosiw
install:
	mkdir -p "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(UNITDIR)" "$(DESTDIR)$(SYSCONFDIR)/gosiw" "$(DESTDIR)$(DOCDIR)"
	$(GO) build -buildvcs=auto -trimpath -o "$(DESTDIR)$(BINDIR)/" ./cmd/siw ./cmd/siwd
	sed -e 's|/usr/local/bin/siwd|$(BINDIR)/siwd|' -e 's|/etc/gosiw/|$(SYSCONFDIR)/gosiw/|' \
		dist/siwd.service > "$(DESTDIR)$(UNITDIR)/siwd.service"
	chmod 0644 "$(DESTDIR)$(UNITDIR)/siwd.service"
	test -e "$(DESTDIR)$(SYSCONFDIR)/gosiw/siwd.toml" || install -m 0644 dist/siwd.toml "$(DESTDIR)$(SYSCONFDIR)/gosiw/siwd.toml"
	install -m 0644 LICENSE README.md "$(DESTDIR)$(DOCDIR)/"

# make install into a temporary DESTDIR, then check every path the unit names.
install-check:
	./scripts/install-check.sh

clean:
	$(GO) clean -testcache
