import CLMDB
public import Foundation
import LedgerCore
import LedgerCrypto

/// Figures measured in one run: the store against raw LMDB calls on the same bytes.
public enum StoreBenchmark {
    /// Runs the benchmark in fresh stores under `directory` and returns the figures.
    /// - Parameters:
    ///   - singleEvents: events appended one durable transaction each.
    ///   - batchedEvents: events appended 1,000 per transaction.
    public static func run(in directory: URL, singleEvents: Int, batchedEvents: Int, log: (String) -> Void) throws -> [String: Any] {
        let fm = FileManager.default
        try? fm.removeItem(at: directory)
        try fm.createDirectory(at: directory, withIntermediateDirectories: true)
        let store = try LedgerStore.create(at: directory.appendingPathComponent("ledger"), configuration: [])
        let rawDirectory = directory.appendingPathComponent("raw")
        try fm.createDirectory(at: rawDirectory, withIntermediateDirectories: true)
        let raw = try LMDBEnvironment(path: rawDirectory.path, databaseNames: ["log"], initialMapSize: 1 << 30)
        let indexedDirectory = directory.appendingPathComponent("raw-indexed")
        try fm.createDirectory(at: indexedDirectory, withIntermediateDirectories: true)
        let indexed = try LMDBEnvironment(
            path: indexedDirectory.path, databaseNames: ["log", "ids", "lineages", "accounts"], initialMapSize: 1 << 30)

        let events = try (0..<(singleEvents + batchedEvents)).map { try sampleEvent($0) }

        log("durable single-event appends: \(singleEvents)")
        let single = try time {
            for event in events[0..<singleEvents] { try store.append([event]) }
        }
        log("batched appends: \(batchedEvents) in transactions of 1,000")
        let batched = try time {
            var index = singleEvents
            while index < events.count {
                let end = min(index + 1000, events.count)
                try store.append(Array(events[index..<end]))
                index = end
            }
        }
        // The same stored bytes, written with raw LMDB calls.
        var stored: [(UInt64, [UInt8])] = []
        try store.read { session in
            try session.forEachStoredRecord { sequence, bytes in
                stored.append((sequence, bytes))
                return true
            }
        }
        log("raw LMDB: same \(stored.count) records")
        let rawSingle = try time {
            for (sequence, bytes) in stored[0..<singleEvents] {
                try raw.write { txn in try txn.put("log", u64Bytes(sequence), bytes, flags: MDB_APPEND) }
            }
        }
        let rawBatched = try time {
            var index = singleEvents
            while index < stored.count {
                let end = min(index + 1000, stored.count)
                try raw.write { txn in
                    for (sequence, bytes) in stored[index..<end] { try txn.put("log", u64Bytes(sequence), bytes, flags: MDB_APPEND) }
                }
                index = end
            }
        }
        // The same records and the same index entries, written with raw LMDB calls.
        var entries: [(key: [UInt8], value: [UInt8], id: [UInt8], lineage: [UInt8], accounts: [[UInt8]])] = []
        for (sequence, bytes) in stored {
            let record = try RecordCodec.decode(bytes, sequence: sequence)
            let key = u64Bytes(sequence)
            entries.append(
                (
                    key, bytes, record.eventId.bytes, (record.event.lineage?.digest.bytes ?? []) + key,
                    Set(record.event.accounts).map { $0.bytes + key }
                ))
        }
        log("raw LMDB with the same index writes")
        let rawIndexed = try time {
            var index = singleEvents
            while index < entries.count {
                let end = min(index + 1000, entries.count)
                try indexed.write { txn in
                    for entry in entries[index..<end] {
                        try txn.put("log", entry.key, entry.value, flags: MDB_APPEND)
                        try txn.put("ids", entry.id, entry.key, flags: MDB_NOOVERWRITE)
                        try txn.put("lineages", entry.lineage, [])
                        for account in entry.accounts { try txn.put("accounts", account, []) }
                    }
                }
                index = end
            }
        }
        log("full-log reads")
        var decoded = 0
        let read = try time {
            try store.read { session in
                try session.forEachRecord { _ in
                    decoded += 1
                    return true
                }
            }
        }
        var rawBytes = 0
        let rawRead = try time {
            try raw.read { txn in
                try txn.scan("log", from: []) { _, value in
                    rawBytes += value.count
                    return true
                }
            }
        }
        func rate(_ count: Int, _ seconds: Double) -> Int { Int((Double(count) / seconds).rounded()) }
        let total = stored.count
        return [
            "records": total,
            "singleAppendsPerSecond": rate(singleEvents, single),
            "rawSingleAppendsPerSecond": rate(singleEvents, rawSingle),
            "singleAppendRatio": (rawSingle / single * 100).rounded() / 100,
            "batchedAppendsPerSecond": rate(batchedEvents, batched),
            "rawBatchedAppendsPerSecond": rate(batchedEvents, rawBatched),
            "batchedAppendRatio": (rawBatched / batched * 100).rounded() / 100,
            "rawIndexedBatchedAppendsPerSecond": rate(batchedEvents, rawIndexed),
            "batchedAppendRatioSameIndexWrites": (rawIndexed / batched * 100).rounded() / 100,
            "readDecodePerSecond": rate(decoded, read),
            "rawReadPerSecond": rate(total, rawRead),
            "readRatio": (rawRead / read * 100).rounded() / 100,
            "averageRecordBytes": rawBytes / max(total, 1),
            "note": "ratio = ledger throughput / raw LMDB throughput on the same bytes in the same run",
        ]
    }

    private static func time(_ body: () throws -> Void) throws -> Double {
        let start = DispatchTime.now().uptimeNanoseconds
        try body()
        return max(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9, 1e-9)
    }

    private static func sampleEvent(_ index: Int) throws -> PendingEvent {
        let lineage = LineageKey(Digest32(try Digest.sha256(Array("lineage-\(index % 5000)".utf8))) ?? .zero)
        let account = AccountID(Array(try Digest.sha256(Array("account-\(index % 3000)".utf8)).prefix(16)))
        let facts = TransactionFacts(
            transactionKey: Digest32(try Digest.sha256(Array("tx-\(index)".utf8))) ?? .zero, productId: "com.myrecipes.premium.monthly",
            purchaseDate: 1_764_000_000_000 + Int64(index), expiresDate: 1_766_600_000_000 + Int64(index), revocationDate: nil,
            ownership: .purchased, environment: "Production", signedDate: 1_764_000_000_000 + Int64(index), provenance: .verifiedJWS)
        return PendingEvent(
            eventId: Digest32(try Digest.randomBytes(32)) ?? .zero, recordedAt: 1_764_000_000_000 + Int64(index),
            event: .transactionSubmitted(TransactionSubmitted(kind: .renewal, account: account, lineage: lineage, transaction: facts)))
    }
}
