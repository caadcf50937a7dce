import Foundation
import LedgerStore
import OwnershipLedger

struct BenchCommand: Subcommand {
    static let name = "bench"
    static let abstract = "Measure appends and reads against raw LMDB on the same bytes; print JSON."
    static let usage = """
        Usage: ledger bench [--single N] [--batched N] [--dir DIR]
               ledger bench serve [--clients N] [--requests N] [--route transactions|submit] [--batch N]
                                  [--fixtures DIR] [--dir DIR]

        In fresh stores under DIR (default a temporary directory, removed afterwards), measures durable
        single-event appends/s (N, default 2,000), batched appends/s (N, default 200,000; 1,000 per
        transaction) and full-log read-and-decode rate, and the same work done with raw LMDB calls on the
        same bytes, as ratios. Progress goes to stderr, the JSON figures to stdout.

        `bench serve` starts `ledger serve` on a fresh store and drives it with --clients keep-alive
        clients on loopback (default 64): --requests (default 20,000) signed purchases to
        POST /v1/transactions, each with a Firebase ID token, or with --route submit as NDJSON batches of
        --batch lines (default 100) to POST /v1/submit. It signs them with the test keys under --fixtures
        (default ./Tests, the repository's) and prints decisions/s, latency percentiles, the commit group
        sizes and the server's resident memory through the run (docs/benchmarks.md).
        """
    static let options: Set<String> = ["single", "batched", "dir", "clients", "requests", "route", "batch", "fixtures"]
    static let positionals = 0...1

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let temporary = arguments.value("dir") == nil
        let directory =
            arguments.value("dir").map { URL(fileURLWithPath: $0) }
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("ledger-bench-\(getpid())")
        defer { if temporary { try? FileManager.default.removeItem(at: directory) } }
        if let mode = arguments.positionals.first {
            guard mode == "serve" else { throw CLIError.usage("unknown bench mode \(mode) (the one mode is serve)") }
            var options = ServeBenchmark.Options(directory: directory)
            options.clients = max(1, try arguments.integer("clients") ?? options.clients)
            options.requests = max(1, try arguments.integer("requests") ?? options.requests)
            options.batch = max(1, try arguments.integer("batch") ?? options.batch)
            options.route = arguments.value("route") ?? options.route
            guard ["transactions", "submit"].contains(options.route) else {
                throw CLIError.usage("--route \(options.route) is not transactions or submit")
            }
            if let fixtures = arguments.value("fixtures") { options.fixtures = URL(fileURLWithPath: fixtures) }
            console.out(JSONLine.render(try ServeBenchmark.run(options) { console.err("bench: \($0)") }))
            return .success
        }
        var figures = try StoreBenchmark.run(
            in: directory, singleEvents: try arguments.integer("single") ?? 2_000,
            batchedEvents: try arguments.integer("batched") ?? 200_000, log: { console.err("bench: \($0)") })
        figures["cores"] = ProcessInfo.processInfo.activeProcessorCount
        figures["memoryGiB"] = Int(ProcessInfo.processInfo.physicalMemory >> 30)
        console.out(JSONLine.render(figures))
        return .success
    }
}
