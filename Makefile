# splatd — the two commands a newcomer needs are `make demo` and `make test`.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
BIN     := bin/splatd
PREFIX  ?= /usr/local
DESTDIR ?=
# nodynamic: no dependency reads the tag since the SOG encoder's WebP became
# our own Go (it kept gen2brain/webp from loading a system libwebp); it is
# kept so that a dependency that links a system library through purego
# stays static. Every go command below (and the tests' own builds) gets it.
export GOFLAGS := $(strip $(GOFLAGS) -tags=nodynamic)

.PHONY: all build test test-s3 test-formats vet fmt-check demo sim bench torture fuzz install uninstall docs deb cross deploy-check image test-image test-kube test-systemd clean

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

# The formats lane: PlayCanvas splat-transform 3.7.0 (npm, cached in
# $$HOME/.cache/splatd-ci) converts generated scenes into every format it
# writes that splatd takes; the validators must accept each file and reject
# truncated and corrupted copies (deploy/test/formats.sh). `make test` skips
# these tests (no SPLATD_SPLAT_TRANSFORM).
test-formats:
	GO=$(GO) bash deploy/test/formats.sh

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
# The watch-folder readers write a file per execution: fewer of them.
FUZZ_SMALL_EXECS ?= 30000x
fuzz:
	$(GO) test ./uploader/splatfile -run '^$$' -fuzz '^FuzzPLYHeader$$' -fuzztime $(FUZZ_EXECS)
	$(GO) test ./uploader/splatfile -run '^$$' -fuzz '^FuzzSOG$$' -fuzztime $(FUZZ_EXECS)
	$(GO) test ./uploader/sidecar -run '^$$' -fuzz '^FuzzSidecar$$' -fuzztime $(FUZZ_SMALL_EXECS)
	$(GO) test ./uploader/sidecar -run '^$$' -fuzz '^FuzzFolderSettings$$' -fuzztime $(FUZZ_SMALL_EXECS)
	$(GO) test ./uploader/sidecar -run '^$$' -fuzz '^FuzzTitleTemplate$$' -fuzztime $(FUZZ_EXECS)
	$(GO) test ./uploader/after -run '^$$' -fuzz '^FuzzReceipt$$' -fuzztime $(FUZZ_SMALL_EXECS)
	$(GO) test ./uploader/splatfile -run '^$$' -fuzz '^FuzzSPZ$$' -fuzztime $(FUZZ_EXECS)
	$(GO) test ./uploader/splatfile -run '^$$' -fuzz '^FuzzSOGFolderMeta$$' -fuzztime $(FUZZ_EXECS)
	$(GO) test ./uploader/sog -run '^$$' -fuzz '^FuzzReadPLY$$' -fuzztime $(FUZZ_SMALL_EXECS)
	$(GO) test ./queue -run '^$$' -fuzz '^FuzzFinalizedRecord$$' -fuzztime $(FUZZ_EXECS)

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

# The container image, built with buildah from deploy/container/Dockerfile and
# the static bin/splatd (no registry needed; buildah and podman come from
# Debian when missing). deploy/README.md says how to build it with docker.
image: build
	bash deploy/container/build.sh

# The image under podman against the simulator on loopback (deploy/test/image.sh).
test-image: image
	bash deploy/test/image.sh

# deploy/kubernetes' sidecar and fleet manifests under `podman kube play`
# against the simulator on loopback (deploy/test/kube.sh).
test-kube: image
	bash deploy/test/kube.sh

# The unit under a real systemd booted with systemd-nspawn, installed as the
# README says (deploy/test/systemd.sh; root only; the first run on a machine
# debootstraps a root into /var/cache/splatd-test). SPLATD_SYSTEMD_SKIP=a,b
# skips named checks.
test-systemd: build
	bash deploy/test/systemd.sh

SYSTEMDUNITDIR ?= /etc/systemd/system
MANDIR         ?= $(PREFIX)/share/man

# Installs binary, unit, sysusers/tmpfiles snippets, man page, bash/zsh/fish
# completions and an example config (kept if one is there). The config holds
# no secret: the token goes to /etc/splatd/token, read by systemd's
# LoadCredential=. `make uninstall` with the same PREFIX and DESTDIR mirrors it.
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
	install -d -m 0755 $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(PREFIX)/share/zsh/site-functions $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	./$(BIN) man > $(DESTDIR)$(MANDIR)/man1/splatd.1
	./$(BIN) completion bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/splatd
	./$(BIN) completion zsh > $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_splatd
	./$(BIN) completion fish > $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/splatd.fish
	chmod 0644 $(DESTDIR)$(MANDIR)/man1/splatd.1 $(DESTDIR)$(PREFIX)/share/bash-completion/completions/splatd \
		$(DESTDIR)$(PREFIX)/share/zsh/site-functions/_splatd $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/splatd.fish
	@echo "next, as root: systemd-sysusers splatd.conf && systemd-tmpfiles --create splatd.conf"
	@echo "  then put the token in /etc/splatd/token (root, 0600) and: systemctl daemon-reload && systemctl enable --now splatd"

# The man page and the completion scripts, generated by the binary from its
# command table (nothing generated is committed).
docs: build
	mkdir -p bin/share
	./$(BIN) man > bin/share/splatd.1
	./$(BIN) completion bash > bin/share/splatd.bash
	./$(BIN) completion zsh > bin/share/_splatd
	./$(BIN) completion fish > bin/share/splatd.fish

# Everything install writes except the config and the token, which may hold
# the operator's edits: those stay, and are named at the end.
uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/splatd
	rm -f $(DESTDIR)$(SYSTEMDUNITDIR)/splatd.service
	rm -f $(DESTDIR)/usr/lib/sysusers.d/splatd.conf $(DESTDIR)/usr/lib/tmpfiles.d/splatd.conf
	rm -f $(DESTDIR)$(MANDIR)/man1/splatd.1
	rm -f $(DESTDIR)$(PREFIX)/share/bash-completion/completions/splatd
	rm -f $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_splatd
	rm -f $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/splatd.fish
	@echo "kept: $(DESTDIR)/etc/splatd (config, token), /var/lib/splatd (job database), the splatd user and /srv/captures"
	@echo "  if the service was enabled, first: systemctl disable --now splatd; after: systemctl daemon-reload"

# The .deb, with goreleaser's nfpm at a pinned version, installed once into
# .tools/ (git-ignored) through the Go module proxy. v2.46 and newer need
# go.digitalxero.dev modules that the proxy here does not serve (403).
NFPM_VERSION ?= v2.45.2
NFPM         := .tools/nfpm-$(NFPM_VERSION)/nfpm
DEB_ARCH     ?= $(shell $(GO) env GOARCH)
DEB_VERSION  ?= $(shell deploy/deb/version.sh)
# DEB_STAGE is the folder deploy/deb/nfpm.yaml takes the generated files from.
DEB_STAGE    := bin/deb-stage

$(NFPM):
	GOBIN=$(CURDIR)/$(dir $(NFPM)) $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)

deb: docs $(NFPM)
	rm -rf $(DEB_STAGE) && mkdir -p $(DEB_STAGE)
	CGO_ENABLED=0 GOOS=linux GOARCH=$(DEB_ARCH) $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(DEB_STAGE)/splatd ./cmd/splatd
	sed 's#^ExecStart=/usr/local/bin/splatd #ExecStart=/usr/bin/splatd #' deploy/systemd/splatd.service > $(DEB_STAGE)/splatd.service
	grep -q '^ExecStart=/usr/bin/splatd ' $(DEB_STAGE)/splatd.service
	gzip -9n < bin/share/splatd.1 > $(DEB_STAGE)/splatd.1.gz
	cp bin/share/splatd.bash bin/share/_splatd bin/share/splatd.fish $(DEB_STAGE)/
	rm -f bin/splatd_*.deb
	DEB_ARCH=$(DEB_ARCH) DEB_VERSION=$(DEB_VERSION) \
		$(NFPM) package --config deploy/deb/nfpm.yaml --packager deb --target bin/

# The platforms CI builds for. Linux is the target with systemd; for the
# others the command is also vetted, its tests included (the library
# packages' benchmarks measure with Linux calls and are not).
CROSS_TARGETS ?= linux/amd64 linux/arm64 darwin/arm64 windows/amd64
cross:
	@set -e; for t in $(CROSS_TARGETS); do \
		os=$${t%/*}; arch=$${t#*/}; ext=; [ $$os != windows ] || ext=.exe; \
		echo "cross: $$os/$$arch -> bin/cross/splatd-$$os-$$arch$$ext"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/cross/splatd-$$os-$$arch$$ext ./cmd/splatd; \
		[ $$os = linux ] || CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) vet ./cmd/...; \
	done

clean:
	rm -rf bin
