import Foundation
import LedgerCore
import LedgerTestSupport
import OwnershipLedger
import Testing

@testable import LedgerStore

/// The store under real operation: readers never wait for writers, dead readers do not pin pages
/// forever, and a damaged file is an error rather than a crash.
@Suite struct StoreOperationTests {
    let t = Fixtures.start

    func purchase(_ ledger: Ledger, _ id: String, uid: String, at: Int64) throws {
        let payload = try Fixtures.payload(Fixtures.transaction(id, at: at))
        _ = try ledger.submit(.transaction(.purchase, uid: uid, payload, .trustedDecoded), at: at)
    }

    /// Waits for `running` at most `seconds` (a guard against a hang, not a timing assertion).
    func finished(_ running: LedgerBinary.Running, within seconds: Double) -> LedgerBinary.Result? {
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var result: LedgerBinary.Result?
        DispatchQueue.global().async {
            result = running.wait()
            done.signal()
        }
        return done.wait(timeout: .now() + seconds) == .success ? result : nil
    }

    /// A writer of `ledger` paused inside its transaction (as a stopped or slow `ledger submit` would
    /// be) once this returns; calling the result lets it commit and waits until it has.
    func pausedWriter(_ ledger: Ledger) -> () -> Void {
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let writerDone = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            _ = try? ledger.store.write { _, _ in
                entered.signal()
                release.wait()
            }
            writerDone.signal()
        }
        entered.wait()
        return {
            release.signal()
            writerDone.wait()
        }
    }

    @Test func aQueryProceedsWhileAWriterHoldsItsTransactionOpen() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        try purchase(ledger, "1", uid: "alice", at: t)
        let resume = pausedWriter(ledger)
        defer { resume() }
        // Another thread of this process reads meanwhile.
        let readDone = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var state: String?
        DispatchQueue.global().async {
            state = try? ledger.binding(originalTransactionId: "1").state
            readDone.signal()
        }
        #expect(readDone.wait(timeout: .now() + 60) == .success, "a read waited for the open write transaction")
        #expect(state == "bound")
        // And another process opens the store and answers.
        let query = try LedgerBinary.start(["binding", "--original-transaction-id", "1", "--store", directory.path("store").path])
        let answered = finished(query, within: 60)
        #expect(answered != nil, "ledger binding waited for the open write transaction")
        #expect(answered?.status == 0, "\(answered?.stderr ?? "")")
        #expect(answered?.json["state"] as? String == "bound")
    }

    /// A writer that waits for another process's write (here one paused inside its transaction, as a
    /// stopped `ledger submit` would be) says so on standard error, then proceeds once it may.
    @Test func aWriterWaitingForAnotherProcesssWriteSaysSo() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let resume = pausedWriter(ledger)
        let line = Fixtures.line(["type": "purchase", "account": "ann", "transaction": Fixtures.transaction("6200", at: t), "at": t])
        let waiting = try LedgerBinary.start(["submit", "--trust-decoded", "--store", directory.path("store").path], stdin: line + "\n")
        // Held well past the 5-second notice (a guard for a slow start, not a timing assertion).
        Thread.sleep(forTimeInterval: 12)
        resume()
        let result = try #require(finished(waiting, within: 60))
        #expect(result.status == 0 && result.json["decision"] as? String == "granted", "\(result.stdout) \(result.stderr)")
        #expect(result.stderr.contains("waiting for another process's write to this store to finish"), "\(result.stderr)")
    }

    @Test func aLongRunningWriterClearsTheSlotOfAReaderKilledInsideItsTransaction() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let store = directory.path("store")
        // Enough records that `ledger log` cannot write them all into a pipe nobody reads.
        for index in 0..<300 { try purchase(ledger, String(10_000 + index), uid: "uid-\(index)", at: t) }
        let reader = Process()
        reader.executableURL = LedgerBinary.url
        reader.arguments = ["log", "--store", store.path]
        let output = Pipe()
        reader.standardOutput = output
        reader.standardError = FileHandle.nullDevice
        try reader.run()
        // Once output arrives, the reader is inside its read transaction, blocked on the full pipe.
        var ready = pollfd(fd: output.fileHandleForReading.fileDescriptor, events: Int16(POLLIN), revents: 0)
        #expect(poll(&ready, 1, 60_000) == 1)
        usleep(200_000)
        kill(reader.processIdentifier, SIGKILL)
        reader.waitUntilExit()
        // The writer (opened before the reader died, so its open-time check did not see it) clears
        // dead readers at most once a second before a write.
        usleep(1_100_000)
        let dataFile = store.appendingPathComponent("data.mdb").path
        func size() throws -> Int { try FileManager.default.attributesOfItem(atPath: dataFile)[.size] as? Int ?? 0 }
        try purchase(ledger, "1", uid: "first-after", at: t)
        let before = try size()
        for index in 0..<300 { try purchase(ledger, String(20_000 + index), uid: "late-\(index)", at: t) }
        let growth = try size() - before
        // Pinned pages would add every commit's dirty pages to the file (megabytes); reused pages add
        // only what 300 small purchases need.
        #expect(growth < 1 << 20, "data.mdb grew by \(growth) bytes over 300 one-line commits")
    }

    /// A store on a read-only file system (a mounted snapshot, a read-only volume) is read without
    /// any lock file, since nothing can write there; writes are refused naming the file system.
    @Test func aStoreOnAReadOnlyFileSystemIsReadWithoutLockFilesAndRefusesWrites() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        try purchase(ledger, "6100", uid: "ann", at: t)
        let storeDirectory = ledger.store.directory
        let copy = directory.path("copy")
        try FileManager.default.createDirectory(at: copy, withIntermediateDirectories: true)
        for name in ["data.mdb", "ledger.key", "ledger-signing.key"] {
            try FileManager.default.copyItem(at: storeDirectory.appendingPathComponent(name), to: copy.appendingPathComponent(name))
        }
        let store = try LedgerStore(opening: copy, lock: nil, readOnlyFileSystem: true)
        #expect(store.onReadOnlyFileSystem)
        #expect(try Ledger(store: store).account(uid: "ann").entitlements.count == 1)
        #expect(try store.replay().isIntact)
        #expect(throws: LedgerStoreError.fileAccess(path: copy.appendingPathComponent("data.mdb").path, operation: "write", errno: EROFS)) {
            try store.write { _, _ in }
        }
        #expect(Set(try FileManager.default.contentsOfDirectory(atPath: copy.path)) == ["data.mdb", "ledger.key", "ledger-signing.key"])
        // The same directory, writable, is opened as usual.
        #expect(try !LedgerStore(opening: copy).onReadOnlyFileSystem)
    }

    @Test func aDataFileShorterThanItsMetaPagesClaimIsCorruptNotACrash() throws {
        let directory = TemporaryDirectory("truncated")
        defer { directory.remove() }
        let store = directory.path("store").path
        let created = try LedgerBinary.run(["init", "--store", store, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"])
        #expect(created.status == 0, "\(created.stderr)")
        let lines = (0..<40).map { index in
            Fixtures.line([
                "type": "purchase", "account": "uid-\(index)", "transaction": Fixtures.transaction(String(5_000 + index), at: t), "at": t,
            ])
        }
        let submitted = try LedgerBinary.run(["submit", "--trust-decoded", "--store", store], stdin: lines.joined(separator: "\n") + "\n")
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let dataFile = directory.path("store/data.mdb").path
        #expect(truncate(dataFile, 16_384) == 0)
        for command in [["binding", "--original-transaction-id", "5000"], ["verify"], ["submit", "--trust-decoded"], ["log"]] {
            let result = try LedgerBinary.run(command + ["--store", store], stdin: lines[0] + "\n")
            #expect(result.status == 3, "\(command): \(result.status) \(result.stderr)")
            #expect(result.stderr.contains(dataFile) && result.stderr.contains("truncated"), "\(result.stderr)")
        }
        #expect(throws: LedgerStoreError.self) { try Ledger(opening: directory.path("store")) }
    }

    /// LMDB does not write pages that one transaction allocated and freed again, though the meta
    /// page's last page number counts them: such a file ends before that page, every page past its
    /// end is free, and it is intact. A file cut short of a page in use is still refused.
    @Test func aFileEndingAtFreePagesIsIntactButOneEndingBeforeAPageInUseIsNot() throws {
        let directory = TemporaryDirectory("loose-tail")
        defer { directory.remove() }
        let path = directory.path("environment").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let dataFile = directory.path("environment/data.mdb").path
        /// The file's length, and the length the newest meta page's last page number implies.
        func lengths() throws -> (file: Int, claimed: Int) {
            let file = try #require(FileManager.default.contents(atPath: dataFile))
            let metas = [0, 4_096].map { offset in
                file.withUnsafeBytes { bytes in
                    (
                        last: bytes.loadUnaligned(fromByteOffset: offset + LMDBFileCheck.lastPageOffset, as: UInt64.self),
                        transaction: bytes.loadUnaligned(fromByteOffset: offset + LMDBFileCheck.transactionOffset, as: UInt64.self)
                    )
                }
            }
            return (file.count, Int(try #require(metas.max { $0.transaction < $1.transaction }).last + 1) * 4_096)
        }
        let environment = try LMDBEnvironment(path: path, databaseNames: ["scratch", "kept"])
        // A large value put and deleted in one transaction: once the transaction has read the free
        // list, its overflow pages go back to it unwritten, and fresh ones are at the end of the file.
        var short = false
        for round in 0..<20 where !short {
            try environment.write { txn in
                try txn.put("kept", Array("k".utf8), Array("round \(round)".utf8))
                try txn.put("scratch", Array("large".utf8), [UInt8](repeating: 7, count: 200_000))
                #expect(try txn.delete("scratch", Array("large".utf8)))
            }
            let (file, claimed) = try lengths()
            short = claimed > file
        }
        #expect(short, "no transaction left pages past the end of the file")
        try LMDBFileCheck.checkLength(of: dataFile)
        let reopened = try LMDBEnvironment(path: path, databaseNames: ["scratch", "kept"], mode: .open(required: "kept"))
        #expect(try reopened.read { txn in try txn.get("kept", Array("k".utf8)) }?.isEmpty == false)
        #expect(truncate(dataFile, 16_384) == 0)
        #expect(throws: LedgerStoreError.self) { try LMDBFileCheck.checkLength(of: dataFile) }
    }

    /// The fuzzer's seeds for the check (512-byte pages): a file that ends at pages on the free list
    /// passes, one that ends before a page missing from it does not, a whole file passes.
    @Test(arguments: [("short-tail-free", true), ("short-tail-in-use", false), ("whole", true)])
    func theFreePagesPastTheEndAreReadFromTheFreeList(seed: String, accepted: Bool) throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../Fuzz/Corpus/LMDBFileCheckFuzzer/\(seed)")
        let file = [UInt8](try Data(contentsOf: url))
        let read: (Int, Int) -> [UInt8]? = { offset, count in offset + count <= file.count ? Array(file[offset..<offset + count]) : nil }
        if accepted {
            try LMDBFileCheck.check(seed, size: file.count, read: read)
        } else {
            #expect(throws: LedgerStoreError.self) { try LMDBFileCheck.check(seed, size: file.count, read: read) }
        }
    }

    /// The map is address space only, but `ulimit -v` counts it: the refusal says so and what to do.
    @Test func aVirtualMemoryLimitBelowTheMapIsExplained() throws {
        let directory = TemporaryDirectory("address-space")
        defer { directory.remove() }
        let store = directory.path("store").path
        let result = try LedgerBinary.runProcess(
            URL(fileURLWithPath: "/bin/sh"),
            [
                "-c", #"ulimit -v 4000000 && exec "$0" init --store "$1" --bundle-id "$2" --environment Sandbox"#, LedgerBinary.url.path, store,
                Fixtures.bundleId,
            ])
        #expect(result.status == 3, "\(result.status) \(result.stderr)")
        #expect(result.stderr.contains("65536 MiB of address space") && result.stderr.contains("ulimit -v"), "\(result.stderr)")
        #expect(result.stderr.contains("LEDGER_MAP_SIZE"), "\(result.stderr)")
    }

    /// `LEDGER_MAP_SIZE` starts the map smaller: the same limit then runs every command, and a map
    /// smaller than the store grows as it fills.
    @Test func aSmallerMapFromTheEnvironmentRunsUnderTheLimitAndGrows() throws {
        let directory = TemporaryDirectory("map-size")
        defer { directory.remove() }
        let store = directory.path("store").path
        let lines = (0..<2_000).map { index in
            Fixtures.line([
                "type": "purchase", "account": "uid-map-\(index)", "transaction": Fixtures.transaction(String(70_000 + index), at: t), "at": t,
            ])
        }
        let input = directory.path("lines.jsonl")
        try (lines.joined(separator: "\n") + "\n").write(to: input, atomically: true, encoding: .utf8)
        let script = #"""
            ulimit -v 4000000 && export LEDGER_MAP_SIZE=1MiB && "$0" init --store "$1" --bundle-id "$2" --environment Sandbox \
            && "$0" submit --trust-decoded --store "$1" < "$3" > /dev/null && "$0" verify --store "$1"
            """#
        let result = try LedgerBinary.runProcess(
            URL(fileURLWithPath: "/bin/sh"), ["-c", script, LedgerBinary.url.path, store, Fixtures.bundleId, input.path])
        #expect(result.status == 0, "\(result.status) \(result.stderr)")
        #expect(result.stdout.contains(#""intact":true"#), "\(result.stdout)")
        let size = try #require(FileManager.default.attributesOfItem(atPath: store + "/data.mdb")[.size] as? Int)
        #expect(size > 1 << 20, "the store outgrew the 1 MiB map it started with: \(size)")
        let bad = try LedgerBinary.run(["verify", "--store", store], environment: ["LEDGER_MAP_SIZE": "lots"])
        #expect(bad.status == 2 && bad.stderr.contains("LEDGER_MAP_SIZE=lots is not a map size"), "\(bad.stderr)")
    }

    @Test(arguments: [
        ("1073741824", 1 << 30), ("1GiB", 1 << 30), ("512MiB", 512 << 20), ("1048577", (1 << 20) + 4_096), ("1024KiB", 1 << 20),
        ("1TiB", 1 << 40),
    ])
    func mapSizesAreBytesOrBinaryUnitsInPages(text: String, bytes: Int) {
        #expect(MapSize.parse(text) == bytes)
    }

    @Test(arguments: ["", "GiB", "1 GiB", "1GB", "1gib", "-1GiB", "+1GiB", "0", "1023KiB", "2TiB", "99999999999999GiB", "1.5GiB", "１GiB"])
    func anythingElseIsNotAMapSize(text: String) {
        #expect(MapSize.parse(text) == nil)
    }
}
