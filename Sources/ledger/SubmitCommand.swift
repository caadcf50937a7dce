import Foundation
import LedgerCore
import OwnershipLedger

struct SubmitCommand: Subcommand {
    static let name = "submit"
    static let abstract = "Read verifier submissions (JSON lines) on stdin; write one decision per line."
    static let usage = """
        Usage: ledger submit [--trust-decoded] [--sequential] [--store DIR] < submissions.jsonl

        Each input line is one JSON object: type (purchase, renewal, restore, notification,
        delete-account, reconciliation), account (the authenticated Firebase UID), signedTransaction or
        signedPayload (Apple JWS, verified), optional at (ISO-8601 or ms) and id (echoed). With
        --trust-decoded, decoded transaction / notification objects and legacy verifyReceipt responses
        (receipt) are accepted without signatures. One JSON decision per line, in order; a malformed line
        gets decision "invalid" and appends nothing. See docs/protocol.md. Exit 0 when every line was answered.
        Lines are read and verified (on every core) while the writer decides and commits those before them;
        --sequential does one after the other on one thread (the same answers; for comparison).
        """
    static let options: Set<String> = []
    static let flags: Set<String> = ["trust-decoded", "sequential"]

    /// The most lines read and verified at once, and so the largest commit of a stream: a commit
    /// writes fewer pages per line the more lines it holds (the regions' pages are per commit), and
    /// the batches in flight take memory. 2,000: 1M lines in 0.93 of the wall time of 1,000-line
    /// commits, peak heap 48 MiB against 33 (docs/benchmarks.md, "Session 32").
    static let batchLines = 2_000
    /// Batches decided and waiting for their answers to be written: with the committer's queue (one
    /// batch waiting while one commits), what bounds the memory of a pipelined submit whatever the
    /// input's size.
    static let answeredBatches = 2

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let ledger = try openLedger(arguments)
        try ledger.store.refuseOnReadOnlyFileSystem()
        try warnIfClockBehindLog(ledger, console: console)
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: arguments.flags.contains("trust-decoded"))
        let input = LineBatches(fileDescriptor: STDIN_FILENO, maximumLineBytes: SubmitProtocol.maximumLineBytes)
        let readError = arguments.flags.contains("sequential") ? sequential(submit, input, console) : pipelined(submit, input, console)
        if let readError {
            throw CLIError(code: .storeError, message: "reading standard input failed: \(readError); lines after the last answer were not read")
        }
        return .success
    }

    /// Read, verify, decide, commit and answer one batch after another. Returns the read error, if any.
    static func sequential(_ submit: SubmitProtocol, _ input: LineBatches, _ console: Console) -> String? {
        var input = input
        while let batch = Batch(&input, submit, threads: 1) {
            console.write(batch.output(submit, decided: submit.decide(batch.prepared)))
        }
        return input.readError
    }

    /// Three stages: a reader thread reads batches of lines and parses and verifies them (a large batch on
    /// every core at once); the committer's writer
    /// decides and commits whatever has arrived (up to ``batchLines`` lines a commit); this thread writes each
    /// batch's answers once its commit is durable, in input order. Both queues between them are bounded.
    /// Returns the read error, if any.
    static func pipelined(_ submit: SubmitProtocol, _ input: LineBatches, _ console: Console) -> String? {
        let committer = GroupCommitter(ledger: submit.ledger, capacity: batchLines, maximumGroup: batchLines, readingAhead: true)
        let answered = AnsweredBatches(capacity: answeredBatches)
        let threads = ProcessInfo.processInfo.activeProcessorCount
        let reader = Thread {
            var input = input
            while let batch = Batch(&input, submit, threads: threads) {
                // Only close() refuses, and it comes after this loop.
                try? committer.enqueue(batch.prepared, waitingForRoom: true) { decided in answered.append(batch, decided) }
            }
            committer.close()  // every batch decided, committed and handed over
            answered.finish(readError: input.readError)
        }
        reader.name = "ledger-submit-reader"
        reader.stackSize = 8 << 20
        reader.start()
        while let (batch, decided) = answered.next() { console.write(batch.output(submit, decided: decided)) }
        return answered.readError
    }

    /// Lines read together: every non-blank line, each prepared (parsed and verified) unless unreadable.
    /// The lines' bytes are not kept once prepared: only why a line could not be read.
    struct Batch: Sendable {
        /// Per line to answer, in order: nil when it was prepared, else why it could not be read.
        let unreadable: [String?]
        let prepared: SubmitProtocol.PreparedLines

        /// The next batch of `input`, prepared (a large one on `threads` threads at once); nil at the end of input.
        init?(_ input: inout LineBatches, _ submit: SubmitProtocol, threads: Int) {
            guard let batch = input.next(upTo: SubmitCommand.batchLines) else { return nil }
            // Blank lines get no answer; every other line gets exactly one, in order.
            let lines = batch.filter {
                if case .bytes(let bytes) = $0 { return !SubmitProtocol.isBlank(bytes) }
                return true
            }
            unreadable = lines.map {
                if case .unreadable(let reason) = $0 { return reason }
                return nil
            }
            prepared = submit.prepare(lines.compactMap(\.bytes), threads: threads)
        }

        /// The answer lines, given what became of the prepared groups.
        func output(_ submit: SubmitProtocol, decided: [Result<[Decision], any Error>]) -> [UInt8] {
            var answers = submit.answers(to: prepared, decided: decided).makeIterator()
            var output: [UInt8] = []
            for reason in unreadable {
                output += reason.map(submit.invalidAnswer) ?? answers.next()?.bytes ?? []
                output.append(UInt8(ascii: "\n"))
            }
            return output
        }
    }
}

/// The batches the writer has committed, waiting for their answers to be written, in commit order.
/// Holds at most `capacity`: the writer waits for room, so a slow reader of the answers slows the
/// commits rather than growing memory.
private final class AnsweredBatches: @unchecked Sendable {
    private let capacity: Int
    private let condition = NSCondition()
    private var batches: [(SubmitCommand.Batch, [Result<[Decision], any Error>])] = []
    private var finished = false
    /// Why reading the input failed, once ``finish(readError:)`` said.
    private(set) var readError: String?

    init(capacity: Int) { self.capacity = capacity }

    func append(_ batch: SubmitCommand.Batch, _ decided: [Result<[Decision], any Error>]) {
        condition.withLock {
            while batches.count >= capacity { condition.wait() }
            batches.append((batch, decided))
            condition.broadcast()
        }
    }

    /// No batch follows.
    func finish(readError: String?) {
        condition.withLock {
            self.readError = readError
            finished = true
            condition.broadcast()
        }
    }

    /// The next batch, waiting for it; nil once finished and drained.
    func next() -> (SubmitCommand.Batch, [Result<[Decision], any Error>])? {
        condition.withLock {
            while batches.isEmpty && !finished { condition.wait() }
            guard !batches.isEmpty else { return nil }
            condition.broadcast()
            return batches.removeFirst()
        }
    }
}
