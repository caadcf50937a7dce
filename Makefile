# Set-up and everyday commands. `make demo` and `make test` are the README's two commands.
SWIFT ?= swift

.PHONY: deps build demo test bench format lint

deps:
	@pkg-config --exists lmdb libcrypto 2>/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq liblmdb-dev libssl-dev pkg-config; }

build: deps
	$(SWIFT) build -c release

demo: build
	.build/release/ledger demo

test: deps
	$(SWIFT) build -c release --product ledger
	$(SWIFT) test --parallel

bench: build
	.build/release/ledger bench

format:
	$(SWIFT) format --in-place --recursive --configuration .swift-format Package.swift Sources Projections Tests

lint:
	$(SWIFT) format lint --strict --recursive --configuration .swift-format Package.swift Sources Projections Tests
