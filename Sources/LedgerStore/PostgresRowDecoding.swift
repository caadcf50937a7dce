import LedgerCore

/// Reads the values PostgreSQL sends back (binary format) into the engine's types, checking every
/// length: the server's bytes are outside input, so a wrong width is ``LedgerStoreError/corrupt(_:)``
/// (or a ``IndexEntry/malformed(_:key:value:)`` entry, which `verify` reports and `rebuild` removes),
/// never a trap.
enum PostgresRowDecoding {
    /// One of the index tables: its name, its columns (all of them the primary key, except the
    /// Merkle node's hash) and their types.
    struct Table {
        let name: String
        let columns: [String]
        let types: [String]
        let keyColumns: [String]

        var arrayPlaceholders: String { types.enumerated().map { "$\($0.offset + 1)::\($0.element)[]" }.joined(separator: ", ") }
        var keyArrayPlaceholders: String {
            types.prefix(keyColumns.count).enumerated().map { "$\($0.offset + 1)::\($0.element)[]" }.joined(separator: ", ")
        }

        /// The key columns of a row as parameters (the position after which a scan continues).
        func key(_ row: [[UInt8]?]) throws -> [PostgresValue] {
            try (0..<keyColumns.count).map { column in
                guard column < row.count, let value = row[column] else { throw LedgerStoreError.corrupt("a NULL in \(name)") }
                switch types[column] {
                case "int8": return .int64(try int64(value))
                case "int2": return .int16(try int16(value))
                default: return .bytes(value)
                }
            }
        }
    }

    static func table(of index: EngineIndex) -> Table {
        switch index {
        case .commands:
            Table(name: "ledger_commands", columns: ["command", "sequence"], types: ["bytea", "int8"], keyColumns: ["command", "sequence"])
        case .lineages:
            Table(
                name: "ledger_lineages", columns: ["lineage", "sequence", "command"], types: ["bytea", "int8", "bytea"],
                keyColumns: ["lineage", "sequence", "command"])
        case .accountLineages:
            Table(
                name: "ledger_account_lineages", columns: ["account", "lineage", "sequence"], types: ["bytea", "bytea", "int8"],
                keyColumns: ["account", "lineage", "sequence"])
        case .merkle:
            Table(name: "ledger_merkle", columns: ["level", "index", "hash"], types: ["int2", "int8", "bytea"], keyColumns: ["level", "index"])
        }
    }

    // MARK: Values

    static func int64(_ value: UnsafeRawBufferPointer?) throws -> Int64 {
        guard let value, value.count == 8 else { throw LedgerStoreError.corrupt("a bigint of \(value?.count ?? 0) bytes from the server") }
        return Int64(bigEndian: value.loadUnaligned(as: Int64.self))
    }

    static func int64(_ value: [UInt8]) throws -> Int64 { try value.withUnsafeBytes { try int64($0) } }

    static func int16(_ value: [UInt8]) throws -> Int16 {
        guard value.count == 2 else { throw LedgerStoreError.corrupt("a smallint of \(value.count) bytes from the server") }
        return Int16(bitPattern: UInt16(value[0]) << 8 | UInt16(value[1]))
    }

    /// A sequence number: a positive bigint.
    static func sequence(_ value: UnsafeRawBufferPointer?) throws -> UInt64 {
        let number = try int64(value)
        guard number > 0 else { throw LedgerStoreError.corrupt("sequence number \(number) in the store") }
        return UInt64(number)
    }

    static func key128(_ value: UnsafeRawBufferPointer?) throws -> Key128 {
        guard let value, value.count == 16 else { throw LedgerStoreError.corrupt("a 16-byte key of \(value?.count ?? 0) bytes in the store") }
        return Key128(loading: value, at: 0)
    }

    static func digest(_ value: UnsafeRawBufferPointer?) throws -> Digest32 {
        guard let value, value.count == 32 else { throw LedgerStoreError.corrupt("a 32-byte hash of \(value?.count ?? 0) bytes in the store") }
        return Digest32(loading: value, at: 0)
    }

    /// The head row: sequence, chain hash (empty while the log is), recordedAt, and the Merkle
    /// frontier (one 32-byte root per bit of the sequence).
    static func head(_ rows: PostgresRows) throws -> LogHead {
        guard rows.count == 1, rows.columns >= 4 else { throw LedgerStoreError.corrupt("the head row is missing") }
        let sequence = try int64(rows.value(0, 0))
        guard sequence >= 0 else { throw LedgerStoreError.corrupt("the head names sequence \(sequence)") }
        var head = LogHead(sequence: UInt64(sequence), recordedAt: try int64(rows.value(0, 2)))
        if sequence > 0 { head.chainHash = try digest(rows.value(0, 1)) }
        guard let frontier = rows.value(0, 3), frontier.count == 32 * head.sequence.nonzeroBitCount else {
            throw LedgerStoreError.corrupt("the head's Merkle frontier has \(rows.value(0, 3)?.count ?? 0) bytes for \(sequence) records")
        }
        head.frontier = stride(from: 0, to: frontier.count, by: 32).map { Digest32(loading: frontier, at: $0) }
        return head
    }

    // MARK: Index entries

    /// An index row as an entry; a row of the wrong shape is ``IndexEntry/malformed(_:key:value:)``
    /// with the row's columns as ``rowKey(of:)`` reads them back (to remove it).
    static func entry(_ index: EngineIndex, _ row: [[UInt8]?]) -> IndexEntry {
        let columns = row.map { $0 ?? [] }
        func sequence(_ bytes: [UInt8]) -> UInt64? {
            guard let number = try? int64(bytes), number > 0 else { return nil }
            return UInt64(number)
        }
        switch index {
        case .commands:
            if columns.count == 2, columns[0].count == 16, let key = Key128(columns[0]), let sequence = sequence(columns[1]) {
                return .command(key, sequence: sequence)
            }
            return .malformed(index, key: columns.first ?? [], value: columns.dropFirst().flatMap { $0 })
        case .lineages:
            if columns.count == 3, columns[0].count == 16, columns[2].count == 16, let lineage = Key128(columns[0]),
                let sequence = sequence(columns[1]), let command = Key128(columns[2])
            {
                return .lineage(LineageKey(lineage), sequence: sequence, command: command)
            }
            return .malformed(index, key: columns.first ?? [], value: columns.dropFirst().flatMap { $0 })
        case .accountLineages:
            if columns.count == 3, columns[0].count == 16, columns[1].count == 16, let account = Key128(columns[0]),
                let lineage = Key128(columns[1]), let sequence = sequence(columns[2])
            {
                return .accountLineage(AccountID(account), LineageKey(lineage), sequence: sequence)
            }
            return .malformed(index, key: columns.first ?? [], value: columns.dropFirst().flatMap { $0 })
        case .merkle:
            if columns.count == 3, let level = try? int16(columns[0]), (0...255).contains(level), let nodeIndex = try? int64(columns[1]),
                nodeIndex >= 0, columns[2].count == 32, let hash = Digest32(columns[2])
            {
                return .merkleNode(level: UInt8(level), index: UInt64(nodeIndex), hash: hash)
            }
            return .malformed(index, key: columns.prefix(2).flatMap { $0 }, value: columns.count > 2 ? columns[2] : [])
        }
    }

    /// The primary-key columns of the row an entry stands for (for `DELETE`), the inverse of ``entry(_:_:)``.
    static func rowKey(of entry: IndexEntry) throws -> [PostgresValue] {
        switch entry {
        case .command(let key, let sequence): return [.bytes(key.bytes), .int64(Int64(bitPattern: sequence))]
        case .lineage(let lineage, let sequence, let command):
            return [.bytes(lineage.bytes), .int64(Int64(bitPattern: sequence)), .bytes(command.bytes)]
        case .accountLineage(let account, let lineage, let sequence):
            return [.bytes(account.bytes), .bytes(lineage.bytes), .int64(Int64(bitPattern: sequence))]
        case .merkleNode(let level, let index, _): return [.int16(Int16(level)), .int64(Int64(bitPattern: index))]
        case .malformed(.merkle, let key, _):
            guard key.count == 10 else { throw LedgerStoreError.corrupt("a malformed Merkle row key of \(key.count) bytes") }
            return [.int16(try int16(Array(key[0..<2]))), .int64(try int64(Array(key[2..<10])))]
        case .malformed(.accountLineages, let key, let value):
            guard value.count >= 8 else { throw LedgerStoreError.corrupt("a malformed account-lineages row of \(value.count) bytes") }
            return [.bytes(key), .bytes(Array(value.dropLast(8))), .int64(try int64(Array(value.suffix(8))))]
        case .malformed(.lineages, let key, let value):
            guard value.count >= 8 else { throw LedgerStoreError.corrupt("a malformed lineages row of \(value.count) bytes") }
            return [.bytes(key), .int64(try int64(Array(value.prefix(8)))), .bytes(Array(value.dropFirst(8)))]
        case .malformed(_, let key, let value):
            return [.bytes(key), .int64(try int64(value))]
        }
    }

    /// Parameters for inserting `entries` (all of one index) with `unnest`: one array per column.
    static func columnValues(_ entries: [IndexEntry]) -> [PostgresValue] {
        let rows = entries.compactMap { try? rowKey(of: $0) }
        guard let first = rows.first else { return [] }
        return (0..<first.count).map { column in array(rows.map { $0[column] }) }
    }

    /// One column's values as an array parameter.
    static func array(_ values: [PostgresValue]) -> PostgresValue {
        switch values.first {
        case .int16?: .int16Array(values.map { if case .int16(let v) = $0 { v } else { 0 } })
        case .int64?: .int64Array(values.map { if case .int64(let v) = $0 { v } else { 0 } })
        default: .bytesArray(values.map { if case .bytes(let v) = $0 { v } else { [] } })
        }
    }
}
