import AppleSignedData
import Foundation
import LedgerCore
import LedgerStore
import OwnershipLedger

struct BenchCommand: Subcommand {
    static let name = "bench"
    static let abstract = "Measure a history (submit rate as the log grows, size, rebuild, verify, queries) or ledger serve."
    static let usage = """
        Usage: ledger bench history --lines FILE [--chunks N] [--samples N] [--commit-lines N] [--dir DIR]
                                    [--bundle-id ID] [--environment E] [--app-apple-id N]
               ledger bench binds [--held N] [--binds N] [--dir DIR]
               ledger bench serve [--clients N] [--requests N] [--route transactions|submit] [--batch N]
                                  [--purchases-per-account N] [--fixtures DIR] [--server LEDGER] [--dir DIR]
               ledger bench sign --in FILE --out FILE [--fixtures DIR]

        `bench history` creates a fresh ledger in DIR (default a temporary directory, removed afterwards; the defaults match
        ../shared/tools/gen_history.py: com.example.myrecipes, Production, 1234567890) and measures, on the
        trusted-decoded submit lines in FILE (`make bench-history` generates them):
          - decided lines/s in each of N equal chunks (default 10): lines parsed by the submit protocol,
            eight commits' worth at a time, then decided, appended and committed in groups of
            --commit-lines (default 2,000) through a group committer that decides the next group while
            a commit syncs, as `ledger submit` does; that rate (what the storage engine sustains) and
            the last chunk's over the first's (lastOverFirst); the submit rate, parsing, deciding and
            rendering one after the other (submitLinesPerSecondByChunk, submitLastOverFirst); the
            parse and render cost per line, and
            per line of each chunk the process's CPU time (parse, decide, render: less inflated than
            wall time by other processes on the cores);
          - bytes per line at rest (data.mdb / lines) and per database;
          - `ledger rebuild` and `ledger verify` run as child processes: records/s, events/s, peak
            anonymous memory (heap) and peak resident memory (which also counts data.mdb's mapped pages);
          - `account --at` and `binding --at` latency in this process (median and 95th percentile of N
            samples, default 200), at times cut inside the history.

        `bench binds` measures what binding one more lineage costs an account that already holds many: in a fresh
        ledger one account buys --held new lineages (default 7,000), then it and an account holding none each buy
        --binds more (default 1,000), one purchase per commit as separate `ledger submit` calls would, in
        alternating blocks of 100 so both see the same machine. It prints both totals and their ratio (held ÷ none).

        `bench serve` starts `ledger serve` on a fresh store and drives it with --clients keep-alive
        clients on loopback (default 64): --requests (default 20,000) signed purchases to
        POST /v1/transactions, each a new lineage bought by a new account with its own Firebase ID token,
        (--purchases-per-account N: each account buys N new lineages with its one token, default 1),
        or with --route submit as NDJSON batches of --batch lines (default 100) to POST /v1/submit. It
        signs them with the test keys under --fixtures (default ./Tests, the repository's) and prints
        decisions/s, latency percentiles, the commit group sizes, the server's anonymous memory
        through the run, and the CPU the server and the clients each used per decision while the
        load ran (docs/benchmarks.md; `make bench-serve`). --server runs that `ledger` binary as the
        server instead of this one: two builds compared under the same clients.

        `bench sign` (benchmark tooling for `make bench-submit`) rewrites trusted-decoded submit lines (FILE, e.g.
        gen_history.py's) into the same lines carrying App Store JWS signed with the test keys under --fixtures:
        each transaction becomes a signedTransaction, each notification a signedPayload whose transaction is
        its signedTransactionInfo. Submit them without --trust-decoded to a ledger initialised with
        --root-certificate Tests/AppleSignedDataTests/Vectors/certs/testCA.der.

        Progress goes to stderr, the JSON figures to stdout.
        """
    static let options: Set<String> = [
        "lines", "chunks", "samples", "commit-lines", "dir", "bundle-id", "environment", "app-apple-id", "clients", "requests", "route", "batch",
        "fixtures",
        "server", "purchases-per-account", "in", "out", "held", "binds",
    ]
    static let positionals = 1...1

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        // Benchmarks make throwaway stores whose keys stay inside them, never in a key directory.
        if arguments.value("keys") != nil { throw CLIError.usage("bench makes throwaway stores that keep their keys inside them: drop --keys") }
        switch arguments.positionals.first {
        case "history": return try history(arguments, console: console)
        case "serve": return try serve(arguments, console: console)
        case "binds": return try binds(arguments, console: console)
        case "sign":
            let figures = try SignedWorkload.run(
                input: URL(fileURLWithPath: try arguments.required("in")), output: URL(fileURLWithPath: try arguments.required("out")),
                fixtures: try fixtures(arguments, needing: SignedWorkload.fixtureFiles), log: { console.err("bench: \($0)") })
            console.out(JSONLine.render(figures))
            return .success
        default: throw CLIError.usage("give history, binds, serve or sign")
        }
    }

    static func serve(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let temporary = arguments.value("dir") == nil
        let directory =
            arguments.value("dir").map { URL(fileURLWithPath: $0) }
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("ledger-bench-\(getpid())")
        defer { if temporary { try? FileManager.default.removeItem(at: directory) } }
        var options = ServeBenchmark.Options(directory: directory)
        options.clients = max(1, try arguments.integer("clients") ?? options.clients)
        options.requests = max(1, try arguments.integer("requests") ?? options.requests)
        options.batch = max(1, try arguments.integer("batch") ?? options.batch)
        options.purchasesPerAccount = max(1, try arguments.integer("purchases-per-account") ?? options.purchasesPerAccount)
        options.route = arguments.value("route") ?? options.route
        guard ["transactions", "submit"].contains(options.route) else {
            throw CLIError.usage("--route \(options.route) is not transactions or submit")
        }
        options.fixtures = try fixtures(arguments, needing: ServeBenchmark.fixtureFiles)
        if let server = arguments.value("server") {
            guard FileManager.default.isExecutableFile(atPath: server) else { throw CLIError.usage("--server \(server) is not an executable file") }
            options.server = URL(fileURLWithPath: server)
        }
        console.out(JSONLine.render(try ServeBenchmark.run(options) { console.err("bench: \($0)") }))
        return .success
    }

    /// The directory of test keys and certificates `bench serve` and `bench sign` sign with:
    /// `--fixtures DIR`, or `Tests` (the repository's, when run from its root). A usage error naming
    /// what is missing when it lacks any of `files`.
    static func fixtures(_ arguments: Arguments, needing files: [String]) throws -> URL {
        let directory = URL(fileURLWithPath: arguments.value("fixtures") ?? "Tests")
        if let missing = files.first(where: { !FileManager.default.isReadableFile(atPath: directory.appendingPathComponent($0).path) }) {
            let given = arguments.value("fixtures").map { "--fixtures \($0)" } ?? "./Tests (no --fixtures given)"
            throw CLIError.usage(
                "bench signs with the test keys in the repository's Tests/ directory, and \(given) has no \(missing): "
                    + "run it from the repository root, or give --fixtures PATH/TO/REPOSITORY/Tests")
        }
        return directory
    }

    static func history(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let linesFile = try arguments.required("lines")
        guard FileManager.default.isReadableFile(atPath: linesFile) else { throw CLIError.usage("cannot read --lines \(linesFile)") }
        let chunks = max(try arguments.integer("chunks") ?? 10, 1)
        let samples = max(try arguments.integer("samples") ?? 200, 1)
        let commitLines = try arguments.integer("commit-lines") ?? SubmitCommand.batchLines
        guard commitLines >= 1 else { throw CLIError.usage("--commit-lines \(commitLines) is not a positive number of lines") }
        let (directory, temporary) = freshDirectory(arguments)
        defer { if temporary { try? FileManager.default.removeItem(at: directory) } }
        guard let environment = AppleEnvironment(rawValue: arguments.value("environment") ?? "Production") else {
            throw CLIError.usage("--environment is not Production, Sandbox, Xcode or LocalTesting")
        }
        let configuration = LedgerConfiguration(
            bundleId: arguments.value("bundle-id") ?? "com.example.myrecipes", environment: environment,
            appAppleId: Int64(arguments.value("app-apple-id") ?? "1234567890"))
        let ledger = try Ledger.initialize(at: directory, configuration: configuration)
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)

        // Decide the lines chunk by chunk, streaming the file.
        let total = try countLines(linesFile)
        guard total > 0 else { throw CLIError.usage("--lines \(linesFile) holds no line") }
        var reader = try LineReader(path: linesFile)
        var rates: [Int] = []
        var submitRates: [Int] = []
        var parseMicroseconds: [Double] = []
        var renderMicroseconds: [Double] = []
        var cpuMicroseconds: [Double] = []
        var uids = Reservoir(capacity: samples)
        var lineages = Reservoir(capacity: samples)
        var invalid = 0
        // Decided as `ledger submit` decides: through a group committer that decides the next group
        // while a commit syncs, a window of commits at a time (parsed first, answered after).
        let window = 8
        let committer = GroupCommitter(ledger: ledger, capacity: commitLines * window, maximumGroup: commitLines, readingAhead: true)
        defer { committer.close() }
        for chunk in 0..<chunks {
            let count = total * (chunk + 1) / chunks - total * chunk / chunks
            var (decide, parse, render): (UInt64, UInt64, UInt64) = (0, 0, 0)
            let cpuBefore = processCPUNanoseconds()
            var done = 0
            while done < count {
                var clock = DispatchTime.now().uptimeNanoseconds
                func lap(_ total: inout UInt64) {
                    let now = DispatchTime.now().uptimeNanoseconds
                    total += now - clock
                    clock = now
                }
                var batches: [(lines: [String], prepared: SubmitProtocol.PreparedLines)] = []
                var taken = 0
                while batches.count < window && done + taken < count {
                    let lines = reader.next(min(commitLines, count - done - taken))
                    guard !lines.isEmpty else { break }
                    batches.append((lines, submit.prepare(lines.map(\.utf8))))
                    taken += lines.count
                }
                guard !batches.isEmpty else { break }
                lap(&parse)
                let decided = Completions(count: batches.count)
                for (index, batch) in batches.enumerated() {
                    try committer.enqueue(batch.prepared, waitingForRoom: true, completion: decided.completion(index))
                }
                let results = decided.wait()
                lap(&decide)
                for (batch, result) in zip(batches, results) {
                    invalid += submit.answers(to: batch.prepared, decided: result).filter { $0.decision == "invalid" }.count
                }
                lap(&render)
                for line in batches.lazy.flatMap(\.lines) {
                    if let uid = field(line, "\"account\":\"") { uids.offer(uid) }
                    if let otid = field(line, "\"originalTransactionId\":\"") { lineages.offer(otid) }
                }
                done += taken
            }
            rates.append(Int(Double(done) / max(Double(decide) / 1e9, 1e-9)))
            submitRates.append(Int(Double(done) / max(Double(parse + decide + render) / 1e9, 1e-9)))
            cpuMicroseconds.append(Double(processCPUNanoseconds() - cpuBefore) / 1e3 / Double(max(done, 1)))
            parseMicroseconds.append(Double(parse) / 1e3 / Double(max(done, 1)))
            renderMicroseconds.append(Double(render) / 1e3 / Double(max(done, 1)))
            console.err(
                "bench: chunk \(chunk + 1)/\(chunks): \(done) lines, \(rates.last ?? 0) decided lines/s, \(submitRates.last ?? 0) submitted lines/s")
        }

        // Size at rest.
        let dataFile = directory.appendingPathComponent("data.mdb").path
        let bytes = (try FileManager.default.attributesOfItem(atPath: dataFile)[.size] as? Int) ?? 0
        let databases = try ledger.store.statistics()
        let head = try ledger.store.head()

        // Queries at times cut inside the history.
        console.err("bench: \(samples) account --at and binding --at queries")
        var generator = SystemRandomNumberGenerator()
        func cutTime() throws -> Int64 {
            let sequence = UInt64.random(in: 1...max(head.sequence, 1), using: &generator)
            return try ledger.store.read { reader in
                try reader.record(sequence).flatMap { bytes in bytes.withUnsafeBytes { RecordCodec.recordedAt(of: $0) } }
            } ?? head.recordedAt
        }
        var accountLatencies: [Double] = []
        var bindingLatencies: [Double] = []
        for index in 0..<samples {
            let time = try cutTime()
            if let uid = uids.items.isEmpty ? nil : uids.items[index % uids.items.count] {
                accountLatencies.append(try milliseconds { _ = try ledger.account(uid: uid, at: time) })
            }
            if let otid = lineages.items.isEmpty ? nil : lineages.items[index % lineages.items.count] {
                bindingLatencies.append(try milliseconds { _ = try ledger.binding(originalTransactionId: otid, at: time) })
            }
        }

        // Rebuild and verify in child processes, for their own peak memory.
        var figures: JSONObject = [
            "lines": total, "invalidLines": invalid, "records": head.sequence, "chunks": chunks, "decidedLinesPerSecondByChunk": rates,
            "firstChunkDecidedLinesPerSecond": rates.first ?? 0, "lastChunkDecidedLinesPerSecond": rates.last ?? 0,
            "lastOverFirst": ratio(rates),
            "submitLinesPerSecondByChunk": submitRates, "submitLastOverFirst": ratio(submitRates), "linesPerCommit": commitLines,
            "decideMicrosecondsPerLineByChunk": rates.map { ($0 == 0 ? 0 : 1e7 / Double($0)).rounded() / 10 },
            "parseMicrosecondsPerLine": parseMicroseconds.map { ($0 * 10).rounded() / 10 },
            "renderMicrosecondsPerLine": renderMicroseconds.map { ($0 * 10).rounded() / 10 },
            "cpuMicrosecondsPerLineByChunk": cpuMicroseconds.map { ($0 * 10).rounded() / 10 },
            "dataFileBytes": bytes, "bytesPerLine": bytes / total,
            "databases": Dictionary(uniqueKeysWithValues: databases.map { ($0.name, ["entries": $0.entries, "bytes": $0.bytes] as JSONObject) }),
            "accountAtMilliseconds": summary(accountLatencies), "bindingAtMilliseconds": summary(bindingLatencies),
            "cores": ProcessInfo.processInfo.activeProcessorCount,
        ]
        for command in ["rebuild", "verify"] {
            console.err("bench: ledger \(command)")
            figures[command] = try child([command, "--store", directory.path])
        }
        console.out(JSONLine.render(figures))
        return .success
    }

    /// The last of `rates` over the first, to two decimals.
    static func ratio(_ rates: [Int]) -> Double { Double((rates.last ?? 0) * 100 / max(rates.first ?? 1, 1)) / 100 }

    /// The store directory of a benchmark, emptied: `--dir`, or a temporary one (`temporary`: remove it afterwards).
    static func freshDirectory(_ arguments: Arguments) -> (directory: URL, temporary: Bool) {
        let named = arguments.value("dir").map { URL(fileURLWithPath: $0) }
        let directory = named ?? FileManager.default.temporaryDirectory.appendingPathComponent("ledger-bench-\(getpid())")
        try? FileManager.default.removeItem(at: directory)
        return (directory, named == nil)
    }

    static func binds(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let held = try arguments.integer("held") ?? 7_000
        let binds = max(try arguments.integer("binds") ?? 1_000, 1)
        let (directory, temporary) = freshDirectory(arguments)
        defer { if temporary { try? FileManager.default.removeItem(at: directory) } }
        let configuration = LedgerConfiguration(bundleId: "com.example.myrecipes", environment: .production, appAppleId: 1_234_567_890)
        let ledger = try Ledger.initialize(at: directory, configuration: configuration)
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)

        // Purchases of new lineages, as gen_history.py writes them; each must be granted (bound to its buyer).
        var bought = 0
        func purchases(by uid: String, _ count: Int) -> [String] {
            (0..<count).map { _ in
                bought += 1
                let id = 3_000_000_000_000_000 + bought
                let at = 1_793_491_200_000 + Int64(bought) * 1_000
                return """
                    {"type":"purchase","account":"\(uid)","transaction":{"originalTransactionId":"\(id)","transactionId":"\(id)",\
                    "productId":"com.example.myrecipes.premium.monthly","bundleId":"com.example.myrecipes","purchaseDate":\(at),\
                    "expiresDate":\(at + 30 * 86_400_000),"inAppOwnershipType":"PURCHASED","environment":"Production","signedDate":\(at),\
                    "type":"Auto-Renewable Subscription"},"at":\(at)}
                    """
            }
        }
        /// Decides `lines` in one commit; the nanoseconds the decision, append and commit took.
        func decide(_ lines: [String]) throws -> UInt64 {
            let prepared = submit.prepare(lines.map(\.utf8))
            let start = DispatchTime.now().uptimeNanoseconds
            let decided = submit.decide(prepared)
            let elapsed = DispatchTime.now().uptimeNanoseconds - start
            for answer in submit.answers(to: prepared, decided: decided) where answer.decision != "granted" {
                throw CLIError(code: .storeError, message: "bench binds: a purchase was answered \(answer.line), not granted")
            }
            return elapsed
        }

        console.err("bench: uid-holder buys \(held) lineages")
        while bought < held {
            _ = try decide(purchases(by: "uid-holder", min(1_000, held - bought)))
        }
        console.err("bench: \(binds) purchases each by uid-holder and uid-newcomer, one per commit")
        var nanoseconds = (holder: [UInt64](), newcomer: [UInt64]())
        var block = 0
        while nanoseconds.holder.count < binds {
            let count = min(100, binds - nanoseconds.holder.count)
            for holderFirst in block % 2 == 0 ? [true, false] : [false, true] {
                for line in purchases(by: holderFirst ? "uid-holder" : "uid-newcomer", count) {
                    let elapsed = try decide([line])
                    if holderFirst { nanoseconds.holder.append(elapsed) } else { nanoseconds.newcomer.append(elapsed) }
                }
            }
            block += 1
        }
        let (holderTotal, newcomerTotal) = (Double(nanoseconds.holder.reduce(0, +)), Double(nanoseconds.newcomer.reduce(0, +)))
        console.out(
            JSONLine.render(
                [
                    "held": held, "binds": binds, "heldAccountSeconds": (holderTotal / 1e6).rounded() / 1e3,
                    "emptyAccountSeconds": (newcomerTotal / 1e6).rounded() / 1e3,
                    "heldOverEmpty": (holderTotal / max(newcomerTotal, 1) * 100).rounded() / 100,
                    "heldAccountMilliseconds": summary(nanoseconds.holder.map { Double($0) / 1e6 }),
                    "emptyAccountMilliseconds": summary(nanoseconds.newcomer.map { Double($0) / 1e6 }),
                    "cores": ProcessInfo.processInfo.activeProcessorCount,
                ] as JSONObject))
        return .success
    }

    /// Wall time, peak memory and the figures of a `ledger` child process. Memory is sampled from
    /// `/proc/PID/status` every 2 ms: `RssAnon` (heap, stacks: what the process allocated) and `VmHWM`
    /// (peak resident, which also counts the pages of data.mdb the LMDB map touched: file cache, not heap).
    static func child(_ arguments: [String]) throws -> JSONObject {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL.resolvingSymlinksInPath()
        if !FileManager.default.isExecutableFile(atPath: process.executableURL?.path ?? "") {
            process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        }
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        let start = DispatchTime.now().uptimeNanoseconds
        try process.run()
        let collected = OutputCollector()
        let reading = DispatchGroup()
        reading.enter()
        DispatchQueue.global().async {
            collected.data = output.fileHandleForReading.readDataToEndOfFile()
            reading.leave()
        }
        var (peakAnonymous, peakResident) = (0, 0)
        let statusFile = "/proc/\(process.processIdentifier)/status"
        while process.isRunning {
            if let text = try? String(contentsOfFile: statusFile, encoding: .utf8) {
                for line in text.split(separator: "\n") {
                    let parts = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                    guard parts.count >= 2, let kib = Int(parts[1]) else { continue }
                    if parts[0] == "RssAnon:" { peakAnonymous = max(peakAnonymous, kib) }
                    if parts[0] == "VmHWM:" { peakResident = max(peakResident, kib) }
                }
            }
            usleep(2_000)
        }
        process.waitUntilExit()
        reading.wait()
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        let report = (try? JSONSerialization.jsonObject(with: collected.data)) as? [String: Any] ?? [:]
        let records = (report["records"] ?? report["verifiedRecords"]) as? Int ?? 0
        let events = report["events"] as? Int ?? 0
        func mebibytes(_ kib: Int) -> Double { (Double(kib) / 102.4).rounded() / 10 }
        return [
            "seconds": (seconds * 1000).rounded() / 1000, "records": records, "events": events,
            "recordsPerSecond": Int(Double(records) / seconds), "eventsPerSecond": Int(Double(events) / seconds),
            "peakAnonymousMiB": mebibytes(peakAnonymous), "peakResidentMiB": mebibytes(peakResident),
            "exitStatus": Int(process.terminationStatus),
            "intact": (report["intact"] as? Bool) ?? ((report["differences"] as? [Any])?.isEmpty ?? false),
        ]
    }

    /// CPU time (user and system) this process has used, in nanoseconds: unlike wall time, not
    /// inflated by other processes competing for the cores.
    static func processCPUNanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// A child's standard output, read on another thread.
    final class OutputCollector: @unchecked Sendable {
        var data = Data()
    }

    static func milliseconds(_ body: () throws -> Void) throws -> Double {
        let start = DispatchTime.now().uptimeNanoseconds
        try body()
        return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6
    }

    static func summary(_ values: [Double]) -> JSONObject {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return [:] }
        func rounded(_ value: Double) -> Double { (value * 1000).rounded() / 1000 }
        return [
            "samples": sorted.count, "median": rounded(sorted[sorted.count / 2]),
            "p95": rounded(sorted[min(sorted.count - 1, sorted.count * 95 / 100)]), "max": rounded(sorted[sorted.count - 1]),
        ]
    }

    /// The string value after `prefix` in a JSON line (enough to sample gen_history's ids).
    static func field(_ line: String, _ prefix: String) -> String? {
        guard let range = line.range(of: prefix), let end = line[range.upperBound...].firstIndex(of: "\"") else { return nil }
        return String(line[range.upperBound..<end])
    }

    static func countLines(_ path: String) throws -> Int {
        var reader = try LineReader(path: path)
        var count = 0
        while true {
            let lines = reader.next(10_000)
            if lines.isEmpty { return count }
            count += lines.count
        }
    }
}

/// A uniform sample of at most `capacity` distinct-ish strings (reservoir sampling).
struct Reservoir {
    let capacity: Int
    private(set) var items: [String] = []
    private var seen = 0
    private var generator = SystemRandomNumberGenerator()

    init(capacity: Int) { self.capacity = capacity }

    mutating func offer(_ item: String) {
        seen += 1
        if items.count < capacity {
            items.append(item)
        } else if case let slot = Int.random(in: 0..<seen, using: &generator), slot < capacity {
            items[slot] = item
        }
    }
}

/// Non-empty lines of a file, read in blocks.
struct LineReader {
    private let handle: FileHandle
    private var buffer: [UInt8] = []
    private var start = 0
    private var atEnd = false

    init(path: String) throws {
        guard let handle = FileHandle(forReadingAtPath: path) else { throw CLIError.usage("cannot read \(path)") }
        self.handle = handle
    }

    /// Up to `limit` lines; empty at the end.
    mutating func next(_ limit: Int) -> [String] {
        var lines: [String] = []
        while lines.count < limit {
            if let newline = buffer[start...].firstIndex(of: 0x0A) {
                if newline > start { lines.append(String(decoding: buffer[start..<newline], as: UTF8.self)) }
                start = newline + 1
                continue
            }
            if atEnd {
                if start < buffer.count { lines.append(String(decoding: buffer[start...], as: UTF8.self)) }
                start = buffer.count
                break
            }
            buffer.removeFirst(start)
            start = 0
            let chunk = handle.readData(ofLength: 1 << 20)
            if chunk.isEmpty { atEnd = true } else { buffer.append(contentsOf: chunk) }
        }
        return lines
    }
}

/// The completions of a window of requests to a group committer, in order.
private final class Completions: @unchecked Sendable {
    private let lock = NSLock()
    private var results: [[Result<[Decision], any Error>]]
    private let done = DispatchSemaphore(value: 0)

    init(count: Int) { results = Array(repeating: [], count: count) }

    func completion(_ index: Int) -> GroupCommitter.Completion {
        { decided in
            self.lock.withLock { self.results[index] = decided }
            self.done.signal()
        }
    }

    /// Waits for every completion.
    func wait() -> [[Result<[Decision], any Error>]] {
        for _ in results { done.wait() }
        return lock.withLock { results }
    }
}
