# splatd — the two commands a newcomer needs are `make demo` and `make test`.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
BIN     := bin/splatd
PREFIX  ?= /usr/local
DESTDIR ?=

.PHONY: all build test test-s3 vet fmt-check demo sim bench torture fuzz install deploy-check clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/splatd

# The test command CI runs (.ci/run calls it). -race needs cgo.
test:
	$(GO) test -race -count=1 ./...

# The S3 lane: the simulator's storage on a real S3 server (versitygw,
# installed pinned into .tools/ on first use), splatd end to end on it.
# `make test` skips these tests (no SPLATD_TEST_S3).
test-s3:
	GO=$(GO) bash deploy/test/s3.sh

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# The daemon against the built-in API simulator with generated sample files.
demo: build
	./$(BIN) demo

sim: build
	./$(BIN) sim -listen 127.0.0.1:8443

# A few seconds of each fuzz target. Budgets are execution counts, not
# durations: a duration races Go 1.26's fuzz coordinator at its deadline and
# fails with a bare "context deadline exceeded" (golang/go#75804, fixed in 1.27).
FUZZ_EXECS ?= 150000x
fuzz:
	$(GO) test ./uploader/splatfile -run '^$$' -fuzz '^FuzzPLYHeader$$' -fuzztime $(FUZZ_EXECS)
	$(GO) test ./uploader/splatfile -run '^$$' -fuzz '^FuzzSOG$$' -fuzztime $(FUZZ_EXECS)

# Performance figures and the reliability suite: the real binary against the
# in-process simulator, on loopback only (bench/README.md explains each line).
# bench prints "name value unit" per figure; torture exits 1 if a target is missed.
bench: build
	@command -v curl >/dev/null || { echo "bench: installing curl (Debian package) for the throughput comparison"; (apt-get update -qq && apt-get install -y -qq curl) >/dev/null 2>&1; } || echo "bench: no curl; the throughput ratio is skipped"
	$(GO) build -o bin/splatbench ./bench/cmd/splatbench
	./bin/splatbench -splatd $(BIN)

torture: build
	$(GO) build -o bin/torture ./bench/cmd/torture
	./bin/torture -splatd $(BIN)

deploy-check:
	bash deploy/check.sh

SYSTEMDUNITDIR ?= /etc/systemd/system

# Installs binary, unit, sysusers/tmpfiles snippets and an example config
# (kept if one is there). The config holds no secret: the token goes to
# /etc/splatd/token, read by systemd's LoadCredential=.
install:
	@test -x $(BIN) || { echo "install: $(BIN) is missing: run 'make build' first, as yourself (root's PATH may have no Go)"; exit 1; }
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/splatd
	install -d -m 0755 $(DESTDIR)$(SYSTEMDUNITDIR)
	sed 's#^ExecStart=/usr/local/bin/splatd #ExecStart=$(PREFIX)/bin/splatd #' deploy/systemd/splatd.service \
		> $(DESTDIR)$(SYSTEMDUNITDIR)/splatd.service
	chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/splatd.service
	install -D -m 0644 deploy/systemd/splatd.sysusers.conf $(DESTDIR)/usr/lib/sysusers.d/splatd.conf
	install -D -m 0644 deploy/systemd/splatd.tmpfiles.conf $(DESTDIR)/usr/lib/tmpfiles.d/splatd.conf
	install -d -m 0755 $(DESTDIR)/etc/splatd
	[ -e $(DESTDIR)/etc/splatd/config.yaml ] || install -m 0644 config.example.yaml $(DESTDIR)/etc/splatd/config.yaml
	@echo "next, as root: systemd-sysusers splatd.conf && systemd-tmpfiles --create splatd.conf"
	@echo "  then put the token in /etc/splatd/token (root, 0600) and: systemctl daemon-reload && systemctl enable --now splatd"

clean:
	rm -rf bin
