// libFuzzer harness for the values a PostgreSQL server sends back (binary format): any bytes in any
// column must decode or be refused as corrupt, never trap; an index row that decodes names the
// same row when turned back into its key. Built and run by `make fuzz`.
@testable import LedgerStore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPostgresRow(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let bytes = fuzzInput(start, count)
    // Columns separated by 0xFF; a column that is exactly [0xFE] stands for NULL.
    let columns: [[UInt8]?] = bytes.split(separator: 0xFF, omittingEmptySubsequences: false).map { $0 == [0xFE] ? nil : Array($0) }
    for column in columns {
        column?.withUnsafeBytes { raw in
            _ = try? PostgresRowDecoding.int64(raw)
            _ = try? PostgresRowDecoding.sequence(raw)
            _ = try? PostgresRowDecoding.key128(raw)
            _ = try? PostgresRowDecoding.digest(raw)
        }
        _ = try? column.map(PostgresRowDecoding.int16)
    }
    for index in EngineIndex.allCases {
        let entry = PostgresRowDecoding.entry(index, columns)
        expect(entry.index == index, "a \(index) row decoded as a \(entry.index) entry")
        if let key = try? PostgresRowDecoding.rowKey(of: entry) {
            expect(key.count == PostgresRowDecoding.table(of: index).keyColumns.count, "a \(index) row key of \(key.count) columns")
        }
        _ = try? PostgresRowDecoding.table(of: index).key(columns)
    }
    return 0
}
