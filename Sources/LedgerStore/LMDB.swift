import CLMDB
import Foundation

/// An LMDB call that failed, with `mdb_strerror` text.
public struct LMDBError: Error, CustomStringConvertible, Sendable {
    public let code: Int32
    public let operation: String
    public var description: String { "\(operation): \(String(cString: mdb_strerror(code)))" }
    var isMapFull: Bool { code == MDB_MAP_FULL }
    var isNotFound: Bool { code == MDB_NOTFOUND }
}

/// Turns an LMDB return code into a thrown ``LMDBError`` naming the call.
@inline(__always)
func lmdb(_ code: Int32, _ operation: @autoclosure () -> String) throws(LMDBError) {
    guard code == MDB_SUCCESS else { throw LMDBError(code: code, operation: operation()) }
}

/// One LMDB environment with its named databases. Growth of the map is handled here: a write
/// that fills the map is aborted, the map doubled and the write run again.
final class LMDBEnvironment: @unchecked Sendable {
    let handle: OpaquePointer
    private var databases: [String: MDB_dbi] = [:]
    /// Serialises transactions of this process so the map can be resized safely.
    private let lock = NSRecursiveLock()

    /// Opens (creating if needed) the environment at `path` and its databases. With `existing`,
    /// that database must already be there: otherwise nothing is created and
    /// ``LMDBError/isNotFound`` is thrown, so a foreign LMDB store is never modified.
    init(path: String, databaseNames: [String], initialMapSize: Int, existing: String? = nil) throws {
        var env: OpaquePointer?
        try lmdb(mdb_env_create(&env), "mdb_env_create")
        guard let env else { throw LMDBError(code: EINVAL, operation: "mdb_env_create") }
        // From here the object is fully initialised: on any failure below, deinit closes `env`.
        handle = env
        try lmdb(mdb_env_set_maxdbs(env, MDB_dbi(databaseNames.count + 2)), "mdb_env_set_maxdbs")
        try lmdb(mdb_env_set_mapsize(env, initialMapSize), "mdb_env_set_mapsize")
        try lmdb(mdb_env_open(env, path, UInt32(MDB_NOTLS), 0o600), "mdb_env_open(\(path))")
        var dead: Int32 = 0
        try lmdb(mdb_reader_check(env, &dead), "mdb_reader_check")
        try write { txn in
            if let existing {
                var dbi: MDB_dbi = 0
                try lmdb(mdb_dbi_open(txn.handle, existing, 0, &dbi), "mdb_dbi_open(\(existing))")
            }
            for name in databaseNames {
                var dbi: MDB_dbi = 0
                try lmdb(mdb_dbi_open(txn.handle, name, UInt32(MDB_CREATE), &dbi), "mdb_dbi_open(\(name))")
                databases[name] = dbi
            }
        }
    }

    deinit { mdb_env_close(handle) }

    func database(_ name: String) -> MDB_dbi { databases[name] ?? 0 }

    /// Current map size in bytes.
    var mapSize: Int {
        var info = MDB_envinfo()
        mdb_env_info(handle, &info)
        return info.me_mapsize
    }

    /// Runs `body` in a read-only transaction.
    func read<T, E: Error>(_ body: (LMDBTransaction) throws(E) -> T) throws -> T {
        lock.lock()
        defer { lock.unlock() }
        let txn = try begin(flags: UInt32(MDB_RDONLY))
        defer { mdb_txn_abort(txn.handle) }
        return try body(txn)
    }

    /// Runs `body` in a write transaction and commits it; aborts on any error. When the map is
    /// full the transaction is aborted, the map doubled and `body` run again, so `body` must not
    /// have effects outside the transaction.
    func write<T, E: Error>(_ body: (LMDBTransaction) throws(E) -> T) throws -> T {
        lock.lock()
        defer { lock.unlock() }
        while true {
            let txn = try begin(flags: 0)
            let result: T
            do {
                result = try body(txn)
            } catch {
                mdb_txn_abort(txn.handle)
                if let error = error as? LMDBError, error.isMapFull {
                    try grow()
                    continue
                }
                throw error
            }
            // mdb_txn_commit frees the transaction whether or not it succeeds: never abort it after.
            let code = mdb_txn_commit(txn.handle)
            if code == MDB_MAP_FULL {
                try grow()
                continue
            }
            try lmdb(code, "mdb_txn_commit")
            return result
        }
    }

    /// Doubles the map. Only called with no transaction open in this process.
    private func grow() throws(LMDBError) {
        try lmdb(mdb_env_set_mapsize(handle, mapSize * 2), "mdb_env_set_mapsize")
    }

    private func begin(flags: UInt32) throws -> LMDBTransaction {
        while true {
            var txn: OpaquePointer?
            let code = mdb_txn_begin(handle, nil, flags, &txn)
            if code == MDB_MAP_RESIZED {
                // Another process grew the map: adopt its size and try again.
                try lmdb(mdb_env_set_mapsize(handle, 0), "mdb_env_set_mapsize")
                continue
            }
            try lmdb(code, "mdb_txn_begin")
            guard let txn else { throw LMDBError(code: EINVAL, operation: "mdb_txn_begin") }
            return LMDBTransaction(handle: txn, environment: self)
        }
    }
}

/// A live transaction; valid only inside the closure that received it.
struct LMDBTransaction {
    let handle: OpaquePointer
    unowned let environment: LMDBEnvironment

    func get(_ db: String, _ key: [UInt8]) throws -> [UInt8]? {
        var k = key
        return try k.withUnsafeMutableBytes { keyBytes -> [UInt8]? in
            var keyVal = MDB_val(mv_size: keyBytes.count, mv_data: keyBytes.baseAddress)
            var value = MDB_val()
            let code = mdb_get(handle, environment.database(db), &keyVal, &value)
            if code == MDB_NOTFOUND { return nil }
            try lmdb(code, "mdb_get(\(db))")
            return Self.bytes(value)
        }
    }

    func put(_ db: String, _ key: [UInt8], _ value: [UInt8], flags: Int32 = 0) throws {
        var k = key
        var v = value
        try k.withUnsafeMutableBytes { keyBytes in
            try v.withUnsafeMutableBytes { valueBytes in
                var keyVal = MDB_val(mv_size: keyBytes.count, mv_data: keyBytes.baseAddress)
                var valueVal = MDB_val(mv_size: valueBytes.count, mv_data: valueBytes.baseAddress)
                try lmdb(mdb_put(handle, environment.database(db), &keyVal, &valueVal, UInt32(flags)), "mdb_put(\(db))")
            }
        }
    }

    /// Deletes `key`; returns false when it was absent.
    @discardableResult
    func delete(_ db: String, _ key: [UInt8]) throws -> Bool {
        var k = key
        return try k.withUnsafeMutableBytes { keyBytes -> Bool in
            var keyVal = MDB_val(mv_size: keyBytes.count, mv_data: keyBytes.baseAddress)
            let code = mdb_del(handle, environment.database(db), &keyVal, nil)
            if code == MDB_NOTFOUND { return false }
            try lmdb(code, "mdb_del(\(db))")
            return true
        }
    }

    /// Visits entries with keys at or after `start`, in key order, until `body` returns false.
    func scan(_ db: String, from start: [UInt8], _ body: (_ key: [UInt8], _ value: [UInt8]) throws -> Bool) throws {
        var cursor: OpaquePointer?
        try lmdb(mdb_cursor_open(handle, environment.database(db), &cursor), "mdb_cursor_open(\(db))")
        defer { mdb_cursor_close(cursor) }
        var k = start
        try k.withUnsafeMutableBytes { keyBytes in
            var key = MDB_val(mv_size: keyBytes.count, mv_data: keyBytes.baseAddress)
            var value = MDB_val()
            var code = mdb_cursor_get(cursor, &key, &value, keyBytes.count == 0 ? MDB_FIRST : MDB_SET_RANGE)
            while code == MDB_SUCCESS {
                guard try body(Self.bytes(key), Self.bytes(value)) else { return }
                code = mdb_cursor_get(cursor, &key, &value, MDB_NEXT)
            }
            if code != MDB_NOTFOUND { try lmdb(code, "mdb_cursor_get(\(db))") }
        }
    }

    /// Visits entries whose keys start with `prefix`.
    func scan(_ db: String, prefix: [UInt8], _ body: (_ key: [UInt8], _ value: [UInt8]) throws -> Void) throws {
        try scan(db, from: prefix) { key, value in
            guard key.starts(with: prefix) else { return false }
            try body(key, value)
            return true
        }
    }

    /// Entries and bytes of `db`.
    func statistics(_ db: String) throws(LMDBError) -> (entries: Int, bytes: Int) {
        var stat = MDB_stat()
        try lmdb(mdb_stat(handle, environment.database(db), &stat), "mdb_stat(\(db))")
        let pages = stat.ms_branch_pages + stat.ms_leaf_pages + stat.ms_overflow_pages
        return (stat.ms_entries, pages * Int(stat.ms_psize))
    }

    static func bytes(_ value: MDB_val) -> [UInt8] {
        guard let data = value.mv_data, value.mv_size > 0 else { return [] }
        return Array(UnsafeRawBufferPointer(start: data, count: value.mv_size))
    }
}
