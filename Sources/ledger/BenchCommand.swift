import Foundation
import LedgerStore
import OwnershipLedger

struct BenchCommand: Subcommand {
    static let name = "bench"
    static let abstract = "Measure appends and reads against raw LMDB on the same bytes; print JSON."
    static let usage = """
        Usage: ledger bench [--single N] [--batched N] [--dir DIR]

        In fresh stores under DIR (default a temporary directory, removed afterwards), measures durable
        single-event appends/s (N, default 2,000), batched appends/s (N, default 200,000; 1,000 per
        transaction) and full-log read-and-decode rate, and the same work done with raw LMDB calls on the
        same bytes, as ratios. Progress goes to stderr, the JSON figures to stdout.
        """
    static let options: Set<String> = ["single", "batched", "dir"]

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let temporary = arguments.value("dir") == nil
        let directory =
            arguments.value("dir").map { URL(fileURLWithPath: $0) }
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("ledger-bench-\(getpid())")
        defer { if temporary { try? FileManager.default.removeItem(at: directory) } }
        var figures = try StoreBenchmark.run(
            in: directory, singleEvents: try arguments.integer("single") ?? 2_000,
            batchedEvents: try arguments.integer("batched") ?? 200_000, log: { console.err("bench: \($0)") })
        figures["cores"] = ProcessInfo.processInfo.activeProcessorCount
        figures["memoryGiB"] = Int(ProcessInfo.processInfo.physicalMemory >> 30)
        console.out(JSONLine.render(figures))
        return .success
    }
}
