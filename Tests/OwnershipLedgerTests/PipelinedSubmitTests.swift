import Foundation
import LedgerTestSupport
import Testing

/// `ledger submit` reads and verifies on one thread while the writer decides and commits: the answers
/// and the store must be exactly those of `ledger submit --sequential` (one batch after the other),
/// through the binary, on the store `LEDGER_TEST_STORE` names (`make test` runs both engines).
@Suite struct PipelinedSubmitTests {
    /// A generated history: purchases, renewals, notifications, restores by owners and others,
    /// refunds, deletions and restores after them, Family Sharing, exact retries, and lines that must
    /// be answered invalid (each with the words its answer must contain), over more than three batches.
    struct History {
        var lines: [(text: String, invalid: String?)] = []
        var input: Data { Data(lines.map { $0.text + "\n" }.joined().utf8) }
        /// The same history without its invalid lines.
        var validInput: Data { Data(lines.filter { $0.invalid == nil }.map { $0.text + "\n" }.joined().utf8) }
        /// Lines that get an answer (blank lines get none).
        var answered: [(text: String, invalid: String?)] { lines.filter { !$0.text.allSatisfy { $0 == " " || $0 == "\t" } } }

        init(lines count: Int, seed: UInt64) {
            var random = SeededGenerator(state: seed)
            var owned: [(otid: String, owner: String, tid: Int)] = []
            var nextId = 0
            var at = Fixtures.start
            func fresh() -> Int {
                nextId += 1
                return nextId
            }
            for index in 0..<count {
                at += 1_000
                let roll = Int.random(in: 0..<100, using: &random)
                let id: Any = index % 3 == 0 ? "line-\(index)" : index
                var line: [String: Any] = ["id": id, "at": at]
                if owned.isEmpty || roll < 22 {
                    let otid = String(3_000_000_000_000 + fresh())
                    let account = owned.isEmpty || roll < 20 ? "uid-\(fresh())" : owned[Int.random(in: 0..<owned.count, using: &random)].owner
                    let family = roll == 21
                    line.merge(
                        [
                            "type": "purchase", "account": account,
                            "transaction": Fixtures.transaction(otid, at: at, ownership: family ? "FAMILY_SHARED" : "PURCHASED"),
                        ]
                    ) { $1 }
                    if !family { owned.append((otid, account, Int(otid) ?? 0)) }
                } else {
                    let pick = Int.random(in: 0..<owned.count, using: &random)
                    let (otid, owner, tid) = owned[pick]
                    switch roll {
                    case 22..<47:
                        owned[pick].tid = tid + 1
                        let transaction = Fixtures.transaction(otid, transactionId: String(tid + 1), at: at)
                        line.merge(["type": "renewal", "account": owner, "transaction": transaction]) { $1 }
                    case 47..<60:
                        let type = roll < 57 ? "DID_RENEW" : "REFUND"
                        let transaction = Fixtures.transaction(otid, transactionId: String(tid), at: at, revokedAt: type == "REFUND" ? at : nil)
                        line.merge(
                            [
                                "type": "notification",
                                "notification": Fixtures.notification(type, uuid: "n-\(fresh())", transaction: transaction, at: at),
                            ]
                        ) { $1 }
                    case 60..<68:
                        line.merge([
                            "type": "restore", "account": owner, "transaction": Fixtures.transaction(otid, transactionId: String(tid), at: at),
                        ]) { $1 }
                    case 68..<73:
                        line.merge(["type": "restore", "account": "uid-\(fresh())", "transaction": Fixtures.transaction(otid, at: at)]) { $1 }
                    case 73..<77:
                        line.merge(["type": "delete-account", "account": owner]) { $1 }
                        owned.removeAll { $0.owner == owner }
                    case 77..<81 where !lines.isEmpty:
                        // An exact retry of an earlier valid line (its answer is the first decision's).
                        let earlier = lines.filter { $0.invalid == nil && !$0.text.isEmpty }
                        lines.append((earlier[Int.random(in: 0..<earlier.count, using: &random)].text, nil))
                        continue
                    default:
                        let invalid = Self.invalidLines(owner: owner, at: at)
                        lines.append(invalid[Int.random(in: 0..<invalid.count, using: &random)])
                        continue
                    }
                }
                lines.append((Fixtures.line(line), nil))
            }
            // Once: a line over the 1 MiB limit, and blank lines (no answer).
            lines.insert((#"{"type":"purchase","account":""# + String(repeating: "x", count: 1 << 20) + #""}"#, "longer than"), at: count / 2)
            lines.insert(("", nil), at: count / 3)
            lines.insert((" \t ", nil), at: 2 * count / 3)
        }

        static func invalidLines(owner: String, at: Int64) -> [(text: String, invalid: String?)] {
            let transaction = Fixtures.line(Fixtures.transaction("4000000000000001", at: at))
            return [
                (#"{"type":"purchase","account":"\#(owner)","account":"someone-else","transaction":\#(transaction)}"#, "duplicate key"),
                (#"{"type":"purchase","account":"\#(owner)","transaction":\#(transaction)"#, "not a valid JSON object"),
                (#"{"type":"teleport","account":"\#(owner)"}"#, "type teleport is not one of"),
                (#"{"type":"restore","account":"\#(owner)","deviceId":"d-1","transaction":\#(transaction)}"#, "unknown field deviceId"),
                (#"{"type":"delete-account","account":"\#(owner)","at":1.5}"#, "at must be"),
                (#"{"type":"renewal","account":"\#(owner)"}"#, "give exactly one of"),
                (
                    Fixtures.line([
                        "type": "purchase", "account": owner, "transaction": Fixtures.transaction("4000000000000002", at: at, bundleId: "com.other"),
                    ]), "bundleId"
                ),
            ]
        }
    }

    let history = History(lines: 2_600, seed: 10)

    /// A new store, initialised through the binary; returns the options that name it.
    func newStore(_ directory: TemporaryDirectory) throws -> [String] {
        let store = try TestStore.current.location(in: directory).arguments
        let result = try LedgerBinary.run(["init", "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"] + store)
        #expect(result.status == 0, "\(result.stderr)")
        return store
    }

    func records(_ store: [String]) throws -> Int? { try LedgerBinary.run(["stats"] + store).json["records"] as? Int }

    func verify(_ store: [String]) throws {
        let verify = try LedgerBinary.run(["verify"] + store)
        #expect(verify.status == 0, "\(verify.stderr)")
        #expect(verify.json["intact"] as? Bool == true, "\(verify.stdout)")
    }

    @Test func pipelinedAnswersAndStoreAreTheSequentialOnesByteForByte() throws {
        let (pipelinedDirectory, sequentialDirectory, validDirectory) = (TemporaryDirectory(), TemporaryDirectory(), TemporaryDirectory())
        defer { [pipelinedDirectory, sequentialDirectory, validDirectory].forEach { $0.remove() } }
        let (pipelinedStore, sequentialStore) = (try newStore(pipelinedDirectory), try newStore(sequentialDirectory))

        let pipelined = try LedgerBinary.run(["submit", "--trust-decoded"] + pipelinedStore, stdinData: history.input)
        let sequential = try LedgerBinary.run(["submit", "--trust-decoded", "--sequential"] + sequentialStore, stdinData: history.input)
        #expect(pipelined.status == 0, "\(pipelined.stderr)")
        #expect(sequential.status == 0, "\(sequential.stderr)")
        #expect(pipelined.stdout == sequential.stdout, "the pipelined answers differ from the sequential ones")

        // One answer per non-blank line, in order; the invalid ones say why.
        let answers = pipelined.lines.map(Fixtures.object)
        #expect(answers.count == history.answered.count)
        let decisions = Set(answers.map { $0["decision"] as? String ?? "" })
        #expect(decisions.isSuperset(of: ["granted", "denied", "recorded", "invalid"]), "\(decisions)")
        #expect(answers.contains { $0["duplicate"] as? Bool == true })
        for (answer, line) in zip(answers, history.answered) {
            if let reason = line.invalid {
                #expect(answer["decision"] as? String == "invalid")
                #expect((answer["message"] as? String)?.contains(reason) == true, "\(answer) for \(line.text.prefix(200))")
            } else {
                #expect(answer["decision"] as? String != "invalid", "\(answer) for \(line.text.prefix(200))")
            }
        }

        try verify(pipelinedStore)
        try verify(sequentialStore)
        let appended = try records(pipelinedStore)
        #expect(appended == (try records(sequentialStore)))
        #expect((appended ?? 0) > history.lines.count / 2)

        // The invalid lines appended nothing and changed no other answer: without them, the same records
        // and the same answers to every other line.
        let validStore = try newStore(validDirectory)
        let valid = try LedgerBinary.run(["submit", "--trust-decoded"] + validStore, stdinData: history.validInput)
        #expect(valid.status == 0, "\(valid.stderr)")
        #expect(valid.lines == zip(pipelined.lines, history.answered).filter { $1.invalid == nil }.map(\.0))
        #expect(try records(validStore) == appended)
    }

    /// Standard input that cannot be read fails the command the same way in both modes: exit 3 naming
    /// the error, nothing appended.
    @Test(arguments: [false, true]) func anUnreadableInputFailsWithTheReadError(sequential: Bool) throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try newStore(directory)
        let process = Process()
        process.executableURL = LedgerBinary.url
        process.arguments = ["submit", "--trust-decoded"] + (sequential ? ["--sequential"] : []) + store
        process.standardInput = try FileHandle(forReadingFrom: directory.url)  // read(2) on a directory: EISDIR
        let (out, err) = (Pipe(), Pipe())
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 3)
        #expect(stderr.contains("reading standard input failed: Is a directory"), "\(stderr)")
        #expect(stdout.isEmpty)
        #expect(try records(store) == 0)
    }

    /// Answers that cannot be written (standard output on a full device) end the command with exit 3
    /// naming the failure, not a trap; what was decided stays durable and is answered when sent again.
    @Test func answersThatCannotBeWrittenEndWithAClearError() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try newStore(directory)
        let process = Process()
        process.executableURL = LedgerBinary.url
        process.arguments = ["submit", "--trust-decoded"] + store
        let (input, err) = (Pipe(), Pipe())
        process.standardInput = input
        process.standardError = err
        process.standardOutput = FileHandle(forWritingAtPath: "/dev/full")
        try process.run()
        let data = history.input
        DispatchQueue.global().async {
            // The command stops reading once its first answers fail to be written.
            try? input.fileHandleForWriting.write(contentsOf: data)
            try? input.fileHandleForWriting.close()
        }
        let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationReason == .exit && process.terminationStatus == 3, "\(stderr)")
        #expect(stderr.contains("writing standard output failed: No space left on device"), "\(stderr)")
        try verify(store)
        let again = try LedgerBinary.run(["submit", "--trust-decoded"] + store, stdinData: history.input)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.lines.count == history.answered.count)
        #expect(again.lines.contains { $0.contains("\"duplicate\":true") })
    }

    /// A client that stops reading the answers ends the command as it did when it ran sequentially: by
    /// SIGPIPE, even though this test process ignores SIGPIPE and its children inherit that (a write
    /// that fails with EPIPE used to trap in Foundation then);
    /// the answers it did read are the right ones, in order; what was committed is intact, and sending
    /// everything again answers every line.
    @Test func aClientThatClosesTheAnswersGetsCorrectAnswersAndAnIntactStore() throws {
        let (directory, referenceDirectory) = (TemporaryDirectory(), TemporaryDirectory())
        defer { [directory, referenceDirectory].forEach { $0.remove() } }
        let (store, reference) = (try newStore(directory), try newStore(referenceDirectory))
        let expected = try LedgerBinary.run(["submit", "--trust-decoded", "--sequential"] + reference, stdinData: history.input).lines
        var terminations: [String] = []
        for sequential in [false, true] {
            let process = Process()
            process.executableURL = LedgerBinary.url
            process.arguments = ["submit", "--trust-decoded"] + (sequential ? ["--sequential"] : []) + store
            let (input, out) = (Pipe(), Pipe())
            process.standardInput = input
            process.standardOutput = out
            process.standardError = FileHandle.nullDevice
            try process.run()
            let data = history.input
            DispatchQueue.global().async {
                try? input.fileHandleForWriting.write(contentsOf: data)
                try? input.fileHandleForWriting.close()
            }
            var received = Data()
            while received.filter({ $0 == 0x0A }).count < 100 {
                let chunk = out.fileHandleForReading.readData(ofLength: 4_096)
                if chunk.isEmpty { break }
                received.append(chunk)
            }
            try out.fileHandleForReading.close()
            process.waitUntilExit()
            terminations.append("\(process.terminationReason == .uncaughtSignal ? "signal" : "exit") \(process.terminationStatus)")
            let lines = String(decoding: received, as: UTF8.self).split(separator: "\n").prefix(100).map(String.init)
            if sequential {
                #expect(lines.count == 100)
            } else {
                #expect(lines == Array(expected.prefix(100)), "a fresh store: the first answers of a sequential run")
            }
            try verify(store)
        }
        #expect(terminations[0] == terminations[1], "pipelined, then sequential: \(terminations)")
        #expect(terminations[0] == "signal \(SIGPIPE)")

        let again = try LedgerBinary.run(["submit", "--trust-decoded"] + store, stdinData: history.input)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.lines.count == history.answered.count)
        try verify(store)
    }
}
