# Set-up and everyday commands. `make demo` and `make test` are the README's two commands.
SWIFT ?= swift

.PHONY: deps build demo test bench bench-history format lint fuzz coverage

deps:
	@{ pkg-config --exists lmdb libcrypto libmicrohttpd && command -v curl; } >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq liblmdb-dev libssl-dev libmicrohttpd-dev pkg-config curl; }

build: deps
	$(SWIFT) build -c release

demo: build
	.build/release/ledger demo

test: deps
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build

# The history benchmark (docs/benchmarks.md): LINES lines of the realistic workload
# ../shared/tools/gen_history.py (generated once into .build/bench), decided into a fresh store.
LINES ?= 100000
# ../shared from the integration checkout, ../../shared from a worktree in /work/wt.
GEN_HISTORY ?= $(firstword $(wildcard ../shared/tools/gen_history.py ../../shared/tools/gen_history.py) ../shared/tools/gen_history.py)
bench: bench-history
bench-history: build
	mkdir -p .build/bench
	test -s .build/bench/lines-$(LINES).jsonl || python3 $(GEN_HISTORY) $(LINES) > .build/bench/lines-$(LINES).jsonl
	rm -rf .build/bench/store-$(LINES)
	.build/release/ledger bench history --lines .build/bench/lines-$(LINES).jsonl --dir .build/bench/store-$(LINES)

format:
	$(SWIFT) format --in-place --recursive --configuration .swift-format Package.swift Sources Projections Tests

lint:
	$(SWIFT) format lint --strict --recursive --configuration .swift-format Package.swift Sources Projections Tests

# Every libFuzzer target in Tests/Fuzz/targets, FUZZ_SECONDS each (default 60; FUZZ_TARGETS picks some).
FUZZ_SECONDS ?= 60
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) SWIFT=$(SWIFT) bash Tests/Fuzz/fuzz.sh

# Line coverage of the library modules from the test suite (the toolchain's llvm-cov).
LLVM_COV ?= $(dir $(shell readlink -f $$(command -v $(SWIFT))))llvm-cov
coverage: deps
	$(SWIFT) build -c release --product ledger
	$(SWIFT) test --enable-code-coverage
	$(LLVM_COV) report .build/debug/OwnershipLedgerPackageTests.xctest -instr-profile=.build/debug/codecov/default.profdata \
	    -ignore-filename-regex='(Tests|\.build)/' | tail -20
