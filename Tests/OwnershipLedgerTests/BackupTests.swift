import Foundation
import LedgerCrypto
import LedgerStore
import LedgerTestSupport
import OwnershipLedger
import Testing

/// `ledger backup` and `ledger restore` through the binary (docs/operations.md): a backup taken beside
/// four running writers holds everything they were answered before it began and restores to a store
/// `ledger verify` accepts; damaged, truncated or altered backups, other ledgers' keys and occupied
/// targets are refused leaving no store; modes 0700/0600; `--include-keys`; argument errors.
@Suite struct BackupTests {
    let directory = TemporaryDirectory("ledger-backup")
    let t = Fixtures.start

    func path(_ name: String) -> String { directory.path(name).path }

    /// A purchase line of a lineage of its own, answered with `id`.
    static func purchase(_ id: String, lineage: String, account: String, at t: Int64) -> String {
        Fixtures.line(["type": "purchase", "account": account, "transaction": Fixtures.transaction(lineage, at: t), "at": t, "id": id])
    }

    func purchase(_ id: String, lineage: String, account: String) -> String { Self.purchase(id, lineage: lineage, account: account, at: t) }

    /// A new store at `store` (its keys in `keys` when given) with `count` purchases.
    @discardableResult
    func makeStore(_ store: String, keys: String? = nil, purchases count: Int = 40, first: Int = 1) throws -> [String] {
        let keyOptions = keys.map { ["--keys", $0] } ?? []
        let created = try LedgerBinary.run(
            ["init", "--store", store, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"] + keyOptions)
        #expect(created.status == 0, "\(created.stderr)")
        let lines = (first..<(first + count)).map { purchase("p\($0)", lineage: "\(5_000_000 + $0)", account: "acct-\($0 % 7)") }
        let submitted = try LedgerBinary.run(
            ["submit", "--trust-decoded", "--store", store] + keyOptions, stdin: lines.joined(separator: "\n") + "\n")
        #expect(submitted.status == 0 && submitted.lines.count == count, "\(submitted.stderr)")
        return lines
    }

    func mode(_ path: String) throws -> Int { try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int ?? -1 }

    // MARK: Writers running

    /// A `ledger submit` process fed `line(0)`, `line(1)`… five every 20 ms (so that four of them share the
    /// store's writes rather than one starving the others) until told to stop, its answers
    /// collected as they arrive.
    final class FedWriter: @unchecked Sendable {
        let process = Process()
        private let input = Pipe()
        private let output = Pipe()
        private let lock = NSLock()
        private var answers: [String] = []
        private var stopping = false
        private let done = DispatchGroup()

        init(arguments: [String], line: @escaping @Sendable (Int) -> String) throws {
            process.executableURL = LedgerBinary.url
            process.arguments = arguments
            process.standardInput = input
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            signal(SIGPIPE, SIG_IGN)
            try process.run()
            done.enter()
            DispatchQueue.global().async { [self] in
                defer { done.leave() }
                for start in stride(from: 0, to: 1_000_000, by: 5) where !lock.withLock({ stopping }) {
                    let chunk = (start..<start + 5).map { line($0) + "\n" }.joined()
                    guard (try? input.fileHandleForWriting.write(contentsOf: Data(chunk.utf8))) != nil else { break }
                    usleep(20_000)
                }
                try? input.fileHandleForWriting.close()
            }
            done.enter()
            DispatchQueue.global().async { [self] in
                defer { done.leave() }
                var pending = Data()
                while true {
                    let data = output.fileHandleForReading.availableData
                    if data.isEmpty { break }
                    pending.append(data)
                    while let newline = pending.firstIndex(of: 0x0a) {
                        let line = String(decoding: pending[pending.startIndex..<newline], as: UTF8.self)
                        pending.removeSubrange(pending.startIndex...newline)
                        lock.withLock { answers.append(line) }
                    }
                }
            }
        }

        /// The answers received so far.
        var answered: [String] { lock.withLock { answers } }

        /// Stops feeding, closes the input and waits for the process to answer what it read and exit.
        func finish() -> Int32 {
            lock.withLock { stopping = true }
            done.wait()
            process.waitUntilExit()
            return process.terminationStatus
        }
    }

    /// Waits (at most a minute) until `condition` holds.
    func eventually(_ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(60)
        while !condition() {
            if Date() > deadline { return false }
            usleep(20_000)
        }
        return true
    }

    @Test func aBackupTakenWhileFourWritersRunHoldsEveryAcknowledgedDecisionAndRestores() throws {
        defer { directory.remove() }
        let store = path("store")
        try makeStore(store, purchases: 20)
        // Four writers, racing over shared lineages (writers 0 and 1 offer each lineage to different
        // accounts, as do 2 and 3), fed until the backup is over.
        let line = { @Sendable (writer: Int, i: Int) -> String in
            Self.purchase(
                "w\(writer)-\(i)", lineage: "\(7_000_000_000 + (writer / 2) * 1_000_000 + i)", account: "w\(writer)-\(i % 40)", at: Fixtures.start)
        }
        let writers = try (0..<4).map { writer in
            try FedWriter(arguments: ["submit", "--trust-decoded", "--store", store]) { line(writer, $0) }
        }
        #expect(eventually { writers.allSatisfy { $0.answered.count >= 20 } }, "the writers did not get going")
        let acknowledged = writers.flatMap(\.answered).map(Fixtures.object)

        let backup = try LedgerBinary.run(["backup", "--store", store, "--out", path("backup")])
        #expect(backup.status == 0, "\(backup.stderr)")
        let answeredByBackupEnd = writers.map(\.answered.count)
        // The writers kept running: each is answered more after the backup.
        #expect(
            eventually { zip(writers, answeredByBackupEnd).allSatisfy { $0.answered.count >= $1 + 20 } },
            "the writers stopped during the backup: \(answeredByBackupEnd) answered by its end, \(writers.map(\.answered.count)) now")
        let late = writers.flatMap { writer in writer.answered.suffix(10) }.map(Fixtures.object)
        for writer in writers { #expect(writer.finish() == 0) }

        let headSeq = backup.json["headSeq"] as? Int ?? 0
        #expect(acknowledged.count >= 80)
        #expect(acknowledged.allSatisfy { ($0["seq"] as? Int ?? .max) <= headSeq }, "an acknowledged decision is past the backup's head")
        #expect(try LedgerBinary.run(["verify", "--store", store]).status == 0)

        let restored = try LedgerBinary.run(["restore", "--from", path("backup"), "--to", path("restored"), "--keys", store])
        #expect(restored.status == 0, "\(restored.stderr)")
        #expect(restored.json["headSeq"] as? Int == headSeq && restored.json["headHash"] as? String == backup.json["headHash"] as? String)
        let verified = try LedgerBinary.run(["verify", "--store", path("restored"), "--keys", store])
        #expect(verified.status == 0 && verified.json["intact"] as? Bool == true, "\(verified.stdout)")
        let stats = try LedgerBinary.run(["stats", "--store", path("restored"), "--keys", store])
        #expect(stats.json["headSeq"] as? Int == headSeq && stats.json["headHash"] as? String == backup.json["headHash"] as? String)

        // Every decision acknowledged before the backup began is in it: sent again to the restored store,
        // each is a duplicate answered with its first decision, code and record.
        let again = acknowledged.compactMap { answer -> String? in
            let parts = (answer["id"] as? String ?? "").dropFirst().split(separator: "-").compactMap { Int($0) }
            return parts.count == 2 ? line(parts[0], parts[1]) : nil
        }
        #expect(again.count == acknowledged.count)
        let answers = try LedgerBinary.run(
            ["submit", "--trust-decoded", "--store", path("restored"), "--keys", store], stdin: again.joined(separator: "\n") + "\n")
        #expect(answers.lines.count == acknowledged.count)
        for (first, second) in zip(acknowledged, answers.lines.map(Fixtures.object)) {
            #expect(second["duplicate"] as? Bool == true, "\(first) was not in the backup: \(second)")
            #expect(second["decision"] as? String == first["decision"] as? String && second["seq"] as? Int == first["seq"] as? Int)
            #expect(second["code"] as? String == first["code"] as? String)
        }
        // Decisions answered after the backup finished are not in it: the copy is one point in time.
        let after = late.filter { ($0["seq"] as? Int ?? 0) > headSeq }
        #expect(!after.isEmpty)
    }

    // MARK: Refusals

    /// Runs restore of `backup` into a new target and expects it refused with `status` and `message`,
    /// leaving no target behind.
    func expectRefused(
        _ backup: String, keys: String?, status: Int32, _ message: String, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let target = path("target-\(UUID().uuidString.prefix(8))")
        let refused = try LedgerBinary.run(["restore", "--from", backup, "--to", target] + (keys.map { ["--keys", $0] } ?? []))
        #expect(refused.status == status, "\(refused.stderr)", sourceLocation: sourceLocation)
        #expect(refused.stderr.contains(message), "\(refused.stderr)", sourceLocation: sourceLocation)
        #expect(refused.stdout.isEmpty, sourceLocation: sourceLocation)
        #expect(!FileManager.default.fileExists(atPath: target), "the refused restore left \(target)", sourceLocation: sourceLocation)
    }

    /// A copy of the backup `source` (modes kept) changed by `damage`.
    func damaged(_ source: String, _ name: String, _ damage: (URL) throws -> Void) throws -> String {
        let copy = path("damaged-\(name)")
        try FileManager.default.copyItem(atPath: source, toPath: copy)
        try damage(URL(fileURLWithPath: copy))
        return copy
    }

    @Test func aDamagedTruncatedOrAlteredBackupIsRefused() throws {
        defer { directory.remove() }
        let store = path("store")
        try makeStore(store)
        let backup = path("backup")
        #expect(try LedgerBinary.run(["backup", "--store", store, "--out", backup, "--include-keys"]).status == 0)
        func data(_ url: URL) -> URL { url.appendingPathComponent("data.mdb") }
        func checkpoint(_ url: URL) -> URL { url.appendingPathComponent("checkpoint.txt") }
        let size = try Data(contentsOf: data(URL(fileURLWithPath: backup))).count

        // Every byte position class: the meta pages, the middle, the last page.
        for offset in [100, size / 2, size - 10] {
            let flipped = try damaged(backup, "flip-\(offset)") { url in
                var bytes = try Data(contentsOf: data(url))
                bytes[offset] ^= 0x01
                try bytes.write(to: data(url))
            }
            try expectRefused(flipped, keys: nil, status: 1, "is not the file the backup's checkpoint signed")
        }
        for length in [0, 4096, size / 2, size - 1] {
            let truncated = try damaged(backup, "truncated-\(length)") { url in
                let handle = try FileHandle(forWritingTo: data(url))
                try handle.truncate(atOffset: UInt64(length))
                try handle.close()
            }
            try expectRefused(truncated, keys: nil, status: 1, "the backup's checkpoint signed \(size): it was truncated")
        }
        let extended = try damaged(backup, "extended") { url in
            let handle = try FileHandle(forWritingTo: data(url))
            try handle.seekToEnd()
            try handle.write(contentsOf: Data(count: 4096))
            try handle.close()
        }
        try expectRefused(extended, keys: nil, status: 1, "it was altered")
        let noData = try damaged(backup, "no-data") { try FileManager.default.removeItem(at: data($0)) }
        try expectRefused(noData, keys: nil, status: 1, "has no data.mdb")
        let noCheckpoint = try damaged(backup, "no-checkpoint") { try FileManager.default.removeItem(at: checkpoint($0)) }
        try expectRefused(noCheckpoint, keys: nil, status: 1, "has no checkpoint.txt")
        let garbage = try damaged(backup, "garbage") { try Data("not a checkpoint\n".utf8).write(to: checkpoint($0)) }
        try expectRefused(garbage, keys: nil, status: 1, "is not a signed checkpoint")
        // data.mdb changed and the checkpoint's digest changed to match, without the signing key.
        let forged = try damaged(backup, "forged") { url in
            var bytes = try Data(contentsOf: data(url))
            bytes[size / 2] ^= 0x01
            try bytes.write(to: data(url))
            let text = try String(contentsOf: checkpoint(url), encoding: .utf8)
            let line = Backup.dataLine(bytes: size, sha256: try Digest.sha256([UInt8](bytes)))
            let changed = text.split(separator: "\n", omittingEmptySubsequences: false).map {
                $0.hasPrefix(Backup.dataLinePrefix) ? line : String($0)
            }
            try Data(changed.joined(separator: "\n").utf8).write(to: checkpoint(url))
        }
        try expectRefused(forged, keys: nil, status: 1, "is not validly signed by ownership-ledger/")
        // A record changed and re-signed with the ledger's own signing key (a backup damaged before it was
        // signed): the digest holds, full verification does not.
        let resigned = try damaged(backup, "resigned") { url in
            var bytes = try Data(contentsOf: data(url))
            try Fixtures.flipEveryOccurrence(of: "com.myrecipes.premium.monthly", in: &bytes)
            try bytes.write(to: data(url))
            let text = try String(contentsOf: checkpoint(url), encoding: .utf8)
            let parsed = try Checkpoint.parse(text).checkpoint
            let key = try Ed25519PrivateKey(pem: try String(contentsOfFile: store + "/ledger-signing.key", encoding: .utf8))
            let line = Backup.dataLine(bytes: bytes.count, sha256: try Digest.sha256([UInt8](bytes)))
            let extensions = parsed.extensions.map { $0.hasPrefix(Backup.dataLinePrefix) ? line : $0 }
            let signed = try Checkpoint(origin: parsed.origin, size: parsed.size, rootHash: parsed.rootHash, extensions: extensions)
                .signed(by: key, keyName: parsed.origin)
            try Data(signed.utf8).write(to: checkpoint(url))
        }
        try expectRefused(resigned, keys: nil, status: 1, "the backup's copy has hash chain")
        // The untouched backup restores.
        let restored = try LedgerBinary.run(["restore", "--from", backup, "--to", path("restored")])
        #expect(restored.status == 0, "\(restored.stderr)")
        #expect(try LedgerBinary.run(["verify", "--store", path("restored")]).status == 0)
    }

    @Test func aCopyThatDoesNotVerifyIsNotKept() throws {
        defer { directory.remove() }
        let store = path("store")
        try makeStore(store)
        let file = URL(fileURLWithPath: store + "/data.mdb")
        var bytes = try Data(contentsOf: file)
        try Fixtures.flipEveryOccurrence(of: "com.myrecipes.premium.monthly", in: &bytes)
        try bytes.write(to: file)
        let refused = try LedgerBinary.run(["backup", "--store", store, "--out", path("backup")])
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(refused.stderr.contains("hash chain") && refused.stderr.contains("nothing was kept"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: path("backup")))
    }

    @Test func keysOfAnotherLedgerAreRefused() throws {
        defer { directory.remove() }
        let (storeA, storeB) = (path("a"), path("b"))
        try makeStore(storeA)
        try makeStore(storeB, purchases: 5)
        #expect(try LedgerBinary.run(["backup", "--store", storeA, "--out", path("backup-a")]).status == 0)
        #expect(try LedgerBinary.run(["backup", "--store", storeA, "--out", path("backup-a-keys"), "--include-keys"]).status == 0)

        // B's keys: its signing key did not sign A's backup.
        try expectRefused(path("backup-a"), keys: storeB, status: 3, "the backup is of the ledger ownership-ledger/")
        // A's signing key with B's ledger key: the store records another key.
        let mixed = path("mixed")
        try FileManager.default.createDirectory(atPath: mixed, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        try FileManager.default.copyItem(atPath: storeA + "/ledger-signing.key", toPath: mixed + "/ledger-signing.key")
        try FileManager.default.copyItem(atPath: storeB + "/ledger.key", toPath: mixed + "/ledger.key")
        try expectRefused(path("backup-a"), keys: mixed, status: 3, "is not the key this store was created with")
        // No key anywhere: the backup was taken without --include-keys.
        try expectRefused(path("backup-a"), keys: nil, status: 3, "holds no key files (it was taken without --include-keys)")
        // The backup's own keys differ from the ones given.
        try expectRefused(path("backup-a-keys"), keys: storeB, status: 3, "belong to different ledgers")
        // Half a key directory.
        let half = path("half")
        try FileManager.default.createDirectory(atPath: half, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        try FileManager.default.copyItem(atPath: storeA + "/ledger.key", toPath: half + "/ledger.key")
        try expectRefused(path("backup-a"), keys: half, status: 3, "holds ledger.key without the other key file")
        // A's keys restore it.
        #expect(try LedgerBinary.run(["restore", "--from", path("backup-a"), "--to", path("restored"), "--keys", storeA]).status == 0)
    }

    // MARK: Files, modes and keys

    @Test func backupFilesAre0600InA0700DirectoryAndHoldKeysOnlyWhenAsked() throws {
        defer { directory.remove() }
        let store = path("store")
        try makeStore(store)
        let ledgerKey = try String(contentsOfFile: store + "/ledger.key", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let signingPEM = try String(contentsOfFile: store + "/ledger-signing.key", encoding: .utf8)
        let signingBody = signingPEM.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()

        // An existing empty directory of mode 0755 is used and made 0700.
        try FileManager.default.createDirectory(atPath: path("plain"), withIntermediateDirectories: false, attributes: [.posixPermissions: 0o755])
        let plain = try LedgerBinary.run(["backup", "--store", store, "--out", path("plain")])
        #expect(plain.status == 0, "\(plain.stderr)")
        #expect(plain.json["keysIncluded"] as? Bool == false)
        #expect(plain.json["files"] as? [String] == ["checkpoint.txt", "data.mdb", "ledger-signing.pub"])
        #expect(try FileManager.default.contentsOfDirectory(atPath: path("plain")).sorted() == ["checkpoint.txt", "data.mdb", "ledger-signing.pub"])
        #expect(try !Fixtures.anyFile(in: directory.path("plain"), contains: ledgerKey))
        #expect(try !Fixtures.anyFile(in: directory.path("plain"), contains: signingBody))

        let keyed = try LedgerBinary.run(["backup", "--store", store, "--out", path("keyed/nested"), "--include-keys"])
        #expect(keyed.status == 0, "\(keyed.stderr)")
        #expect(keyed.json["keysIncluded"] as? Bool == true)
        for name in ["ledger.key", "ledger-signing.key"] {
            #expect(try Data(contentsOf: directory.path("keyed/nested/" + name)) == Data(contentsOf: URL(fileURLWithPath: store + "/" + name)))
        }
        for backup in ["plain", "keyed", "keyed/nested"] { #expect(try mode(path(backup)) == 0o700, "\(backup)") }
        for backup in ["plain", "keyed/nested"] {
            for name in try FileManager.default.contentsOfDirectory(atPath: path(backup)) {
                #expect(try mode(path(backup + "/" + name)) == 0o600, "\(backup)/\(name)")
            }
        }
        // The summary is the copy's: its head, and a checkpoint the live ledger still verifies after more writes.
        let stats = try LedgerBinary.run(["stats", "--store", store])
        #expect(plain.json["headSeq"] as? Int == stats.json["headSeq"] as? Int)
        #expect(plain.json["headHash"] as? String == stats.json["headHash"] as? String)
        #expect(try String(contentsOfFile: path("plain/checkpoint.txt"), encoding: .utf8) == plain.json["checkpoint"] as? String)
        try makeMorePurchases(store)
        let checked = try LedgerBinary.run([
            "verify", "--store", store, "--checkpoint", path("plain/checkpoint.txt"), "--public-key", path("plain/ledger-signing.pub"),
        ])
        #expect(checked.status == 0, "\(checked.stdout)")

        // Restored with its own keys: they are written beside the data, 0600, and the store answers as the live one did.
        let restored = try LedgerBinary.run(["restore", "--from", path("keyed/nested"), "--to", path("restored")])
        #expect(restored.status == 0, "\(restored.stderr)")
        #expect(restored.json["keysRestored"] as? Bool == true && restored.json["keys"] as? String == path("restored"))
        #expect(try mode(path("restored")) == 0o700)
        for name in try FileManager.default.contentsOfDirectory(atPath: path("restored")) {
            #expect(try mode(path("restored/" + name)) == 0o600, "\(name)")
        }
        #expect(try LedgerBinary.run(["verify", "--store", path("restored")]).status == 0)
        let binding = try LedgerBinary.run(["binding", "--original-transaction-id", "5000003", "--store", path("restored")])
        #expect(binding.json["account"] as? String == "acct-3", "\(binding.stdout)")

        // A store whose keys live elsewhere: the backup holds none, the restore uses --keys and writes none.
        let (outside, keys) = (path("outside"), path("keys"))
        try makeStore(outside, keys: keys, purchases: 5)
        #expect(try LedgerBinary.run(["backup", "--store", outside, "--keys", keys, "--out", path("outside-backup")]).status == 0)
        #expect(try LedgerStore.keyFileNames(in: directory.path("outside-backup")).isEmpty)
        let withKeys = try LedgerBinary.run(["restore", "--from", path("outside-backup"), "--to", path("outside-restored"), "--keys", keys])
        #expect(withKeys.status == 0 && withKeys.json["keysRestored"] as? Bool == false, "\(withKeys.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: path("outside-restored")) == ["data.mdb"])
        #expect(try LedgerBinary.run(["verify", "--store", path("outside-restored"), "--keys", keys]).status == 0)
        // The same keys placed in the target first (LEDGER_KEYS unset): used from there.
        try FileManager.default.createDirectory(atPath: path("prepared"), withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        for name in ["ledger.key", "ledger-signing.key"] {
            try FileManager.default.copyItem(atPath: keys + "/" + name, toPath: path("prepared/" + name))
        }
        let prepared = try LedgerBinary.run(["restore", "--from", path("outside-backup"), "--to", path("prepared")])
        #expect(prepared.status == 0 && prepared.json["keysRestored"] as? Bool == false, "\(prepared.stderr)")
        #expect(try LedgerBinary.run(["verify", "--store", path("prepared")]).status == 0)
    }

    func makeMorePurchases(_ store: String) throws {
        let lines = (100..<110).map { purchase("m\($0)", lineage: "\(6_000_000 + $0)", account: "more") }
        #expect(try LedgerBinary.run(["submit", "--trust-decoded", "--store", store], stdin: lines.joined(separator: "\n") + "\n").status == 0)
    }

    @Test func badArgumentsAndOccupiedDirectoriesGetClearErrors() throws {
        defer { directory.remove() }
        let store = path("store")
        try makeStore(store, purchases: 3)
        #expect(try LedgerBinary.run(["backup", "--store", store, "--out", path("backup")]).status == 0)
        try Data("x".utf8).write(to: directory.path("file"))
        try FileManager.default.createDirectory(atPath: path("full"), withIntermediateDirectories: false)
        try Data("x".utf8).write(to: directory.path("full/notes.txt"))

        let cases: [(arguments: [String], status: Int32, message: String)] = [
            (["backup", "--store", store], 2, "--out is required"),
            (["backup", "--store", store, "--out", path("full")], 3, "is not empty (it holds notes.txt)"),
            (["backup", "--store", store, "--out", path("file")], 3, "exists and is not a directory"),
            (["backup", "--store", store, "--out", store], 3, "is the store itself"),
            (["backup", "--store", store, "--out", path("backup")], 3, "already holds a ledger (data.mdb)"),
            (["backup", "--store", path("missing"), "--out", path("new-1")], 3, "no ledger at"),
            (["backup", "--store", store, "--out", path("new-2"), "--include-keys=yes"], 2, "--include-keys is a flag"),
            (["restore", "--to", path("new-4")], 2, "--from is required"),
            (["restore", "--from", path("backup")], 2, "--to is required"),
            (["restore", "--from", path("backup"), "--to", path("new-5"), "--store", store], 2, "not --store"),
            (["restore", "--from", path("backup"), "--to", path("backup")], 2, "the same directory"),
            (["restore", "--from", path("backup"), "--to", "postgres://ledger@localhost/ledger"], 2, "ledger migrate --from DIR"),
            (["restore", "--from", path("backup"), "--to", store, "--keys", store], 3, "already holds a ledger (data.mdb): it is never overwritten"),
            (["restore", "--from", path("backup"), "--to", path("full"), "--keys", store], 3, "is not empty (it holds notes.txt)"),
            (["restore", "--from", path("nothing-here"), "--to", path("new-6"), "--keys", store], 3, "there is no backup at"),
            (["restore", "--from", path("full"), "--to", path("new-7"), "--keys", store], 1, "has no checkpoint.txt"),
        ]
        for (arguments, status, message) in cases {
            let result = try LedgerBinary.run(arguments)
            #expect(result.status == status, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
        }
        for name in (1...7).map({ "new-\($0)" }) { #expect(!FileManager.default.fileExists(atPath: path(name)), "\(name) was created") }
        #expect(try FileManager.default.contentsOfDirectory(atPath: path("full")) == ["notes.txt"])
        #expect(try LedgerBinary.run(["verify", "--store", store]).status == 0)
        // Both commands are in the overview and have usage text.
        let overview = try LedgerBinary.run(["--help"]).stdout
        #expect(overview.contains("  backup ") && overview.contains("  restore "))
        #expect(try LedgerBinary.run(["restore", "--help"]).stdout.contains("Usage: ledger restore --from BACKUP --to DIR"))
    }

    @Test func theDataLineHasOneSpelling() {
        let digest = [UInt8](repeating: 0xab, count: 32)
        let line = Backup.dataLine(bytes: 4096, sha256: digest)
        #expect(Backup.parseDataLine(line)?.bytes == 4096 && Backup.parseDataLine(line)?.sha256 == digest)
        for bad in [
            "backup data.mdb 04096 " + digest.hex, "backup data.mdb +4096 " + digest.hex, "backup data.mdb -1 " + digest.hex,
            "backup data.mdb 4096 " + digest.hex.uppercased(), "backup data.mdb 4096 " + digest.hex.dropLast(), "backup data.mdb 4096  " + digest.hex,
            "backup data.mdb 4096 " + digest.hex + " x", "backup data.mdb 4096", "projection state v2 " + digest.hex,
        ] {
            #expect(Backup.parseDataLine(bad) == nil, "\(bad)")
        }
    }
}
