# Set-up and everyday commands. `make demo` and `make test` are the README's two commands.
SWIFT ?= swift

.PHONY: deps build demo test bench bench-history bench-binds bench-format1 bench-submit bench-tenths bench-lookups bench-serve bench-postgres format lint fuzz soak coverage

deps:
	@{ pkg-config --exists lmdb libcrypto libmicrohttpd libpq && command -v curl && command -v python3 && test -x "$$(pg_config --bindir)/initdb"; } >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq liblmdb-dev libssl-dev libmicrohttpd-dev libpq-dev postgresql pkg-config curl python3; }

build: deps
	$(SWIFT) build -c release

demo: build
	.build/release/ledger demo

# The whole suite on the embedded store, then the behavioural suites again on PostgreSQL (a throwaway
# cluster per test process; docs/testing.md), so the two engines cannot drift.
PG_SUITES = ContractScenarioTests|IdentityVaultTests|PipelinedSubmitTests|ForensicsTests|SupportTransferTests|IdempotencyTests|DecisionRuleTests|PropertyTests|GroupCommitterTests|AuthenticatedCallerTests
test: deps
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build
	LEDGER_TEST_STORE=postgres $(SWIFT) test --skip-build --filter '$(PG_SUITES)'

# The history benchmark (docs/benchmarks.md): LINES lines of the realistic workload
# ../shared/tools/gen_history.py (generated once into .build/bench), decided into a fresh store.
LINES ?= 100000
# ../shared from the integration checkout, ../../shared from a worktree in /work/wt.
GEN_HISTORY ?= $(firstword $(wildcard ../shared/tools/gen_history.py ../../shared/tools/gen_history.py) ../shared/tools/gen_history.py)
bench: bench-history bench-binds
bench-history: build
	mkdir -p .build/bench
	test -s .build/bench/lines-$(LINES).jsonl || python3 $(GEN_HISTORY) $(LINES) > .build/bench/lines-$(LINES).jsonl
	rm -rf .build/bench/store-$(LINES)
	.build/release/ledger bench history --lines .build/bench/lines-$(LINES).jsonl --dir .build/bench/store-$(LINES)

# One more binding for an account holding 7,000 lineages vs one holding none (docs/benchmarks.md).
bench-binds: build
	.build/release/ledger bench binds

# Storage format 1 beside format 2 through the binary alone (docs/benchmarks.md): FORMAT1 is a release
# build of the last format-1 commit, e.g. `git worktree add ../v1 7d3dd82^ && (cd ../v1 && swift build -c release)`.
FORMAT1 ?= ../v1/.build/release/ledger
bench-format1: build
	mkdir -p .build/bench
	test -s .build/bench/lines-$(LINES).jsonl || python3 $(GEN_HISTORY) $(LINES) > .build/bench/lines-$(LINES).jsonl
	python3 Tests/Benchmarks/history-cli.py .build/bench/lines-$(LINES).jsonl $(FORMAT1)=format1 .build/release/ledger=format2 --work .build/bench/cli

# `ledger submit` end to end (docs/benchmarks.md), each into a fresh store, timed by /usr/bin/time
# (Debian `time`): SUBMIT_LINES gen_history.py lines with --trust-decoded, then SIGNED_LINES of them
# signed with the test PKI (`ledger bench sign`) without it. Prints lines/s and peak resident memory.
SUBMIT_LINES ?= 1000000
SIGNED_LINES ?= 20000
BENCH_INIT = init --bundle-id com.example.myrecipes --environment Production --app-apple-id 1234567890
bench-submit: build
	mkdir -p .build/bench
	test -s .build/bench/lines-$(SUBMIT_LINES).jsonl || python3 $(GEN_HISTORY) $(SUBMIT_LINES) > .build/bench/lines-$(SUBMIT_LINES).jsonl
	test -s .build/bench/lines-$(SIGNED_LINES).jsonl || python3 $(GEN_HISTORY) $(SIGNED_LINES) > .build/bench/lines-$(SIGNED_LINES).jsonl
	test -s .build/bench/signed-$(SIGNED_LINES).jsonl || .build/release/ledger bench sign \
	    --in .build/bench/lines-$(SIGNED_LINES).jsonl --out .build/bench/signed-$(SIGNED_LINES).jsonl
	rm -rf .build/bench/submit-trusted .build/bench/submit-signed
	.build/release/ledger $(BENCH_INIT) --store .build/bench/submit-trusted > /dev/null
	/usr/bin/time -o .build/bench/time-trusted -f '%e %M' .build/release/ledger submit --trust-decoded \
	    --store .build/bench/submit-trusted < .build/bench/lines-$(SUBMIT_LINES).jsonl > .build/bench/answers-trusted.jsonl
	awk '{ printf "submit --trust-decoded: $(SUBMIT_LINES) lines in %s s: %.0f lines/s, peak %.1f MiB\n", $$1, $(SUBMIT_LINES) / $$1, $$2 / 1024 }' .build/bench/time-trusted
	.build/release/ledger $(BENCH_INIT) --store .build/bench/submit-signed \
	    --root-certificate Tests/AppleSignedDataTests/Vectors/certs/testCA.der > /dev/null
	/usr/bin/time -o .build/bench/time-signed -f '%e %M' .build/release/ledger submit \
	    --store .build/bench/submit-signed < .build/bench/signed-$(SIGNED_LINES).jsonl > .build/bench/answers-signed.jsonl
	awk '{ printf "submit (signed JWS, test PKI): $(SIGNED_LINES) lines in %s s: %.0f lines/s, peak %.1f MiB\n", $$1, $(SIGNED_LINES) / $$1, $$2 / 1024 }' .build/bench/time-signed

# Issue 9's slope through the binary, paired against the machine's drift (docs/benchmarks.md): the
# first tenth of SUBMIT_LINES into a fresh store, the last into a copy of the first nine tenths, ROUNDS times;
# and the first tenth into a store of as many lines of another stream (the store's size alone).
ROUNDS ?= 5
bench-tenths: build
	mkdir -p .build/bench
	test -s .build/bench/lines-$(SUBMIT_LINES).jsonl || python3 $(GEN_HISTORY) $(SUBMIT_LINES) > .build/bench/lines-$(SUBMIT_LINES).jsonl
	CONTROL=$(GEN_HISTORY) bash Tests/Benchmarks/tenths.sh .build/release/ledger .build/bench/lines-$(SUBMIT_LINES).jsonl $(ROUNDS) .build/bench/tenths

# What a random lookup costs LMDB itself (Debian's liblmdb, none of the ledger's code) in the trees of the
# store after the first tenth and of the store of the first nine tenths, both left by `make bench-tenths`.
bench-lookups:
	test -d .build/bench/tenths/first -a -d .build/bench/tenths/nine || { echo "run make bench-tenths first: it leaves the two stores" >&2; exit 2; }
	cc -O2 -o .build/bench/engine-lookups Tests/Benchmarks/engine-lookups.c $$(pkg-config --cflags --libs lmdb)
	for store in first nine; do echo "$$store:"; .build/bench/engine-lookups .build/bench/tenths/$$store; done

# `ledger serve` under 64 keep-alive clients (docs/benchmarks.md); BENCH_ARGS adds options, e.g.
# BENCH_ARGS="--route submit --batch 50 --requests 400" for NDJSON batches.
bench-serve: build
	.build/release/ledger bench serve $(BENCH_ARGS)

# The PostgreSQL benchmark (docs/benchmarks.md): decisions/s with 1, 2 and 4 writer processes on a
# throwaway local cluster beside LMDB, rebuild and verify rates, bytes per line.
bench-postgres: build
	LINES=$(LINES) GEN_HISTORY=$(GEN_HISTORY) bash Tests/Benchmarks/postgres-bench.sh

format:
	$(SWIFT) format --in-place --recursive --configuration .swift-format Package.swift Sources Projections Tests

lint:
	$(SWIFT) format lint --strict --recursive --configuration .swift-format Package.swift Sources Projections Tests

# Every libFuzzer target in Tests/Fuzz/targets, FUZZ_SECONDS each (default 60; FUZZ_TARGETS picks some).
FUZZ_SECONDS ?= 60
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) SWIFT=$(SWIFT) bash Tests/Fuzz/fuzz.sh

# Concurrent `ledger submit` writers killed with SIGKILL at random moments, checked after every kill, for
# SOAK_SECONDS (default 300; docs/testing.md). Drives only the binary; CI does not run it.
SOAK_SECONDS ?= 300
soak: build
	@command -v python3 >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3; }
	python3 Tests/Soak/soak.py --seconds $(SOAK_SECONDS) --ledger .build/release/ledger

# Line coverage of the library modules from the test suite (the toolchain's llvm-cov).
LLVM_COV ?= $(dir $(shell readlink -f $$(command -v $(SWIFT))))llvm-cov
coverage: deps
	$(SWIFT) build -c release --product ledger
	$(SWIFT) test --enable-code-coverage
	$(LLVM_COV) report .build/debug/OwnershipLedgerPackageTests.xctest -instr-profile=.build/debug/codecov/default.profdata \
	    -ignore-filename-regex='(Tests|\.build)/' | tail -20
