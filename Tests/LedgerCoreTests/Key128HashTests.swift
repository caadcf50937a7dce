import LedgerCore
import Testing

/// ``Key128`` hashes with its own mix of both words (the writer's tables hash keys millions of times);
/// these pin what a table needs from it.
@Suite struct Key128HashTests {
    @Test func equalKeysHashEquallyAndWrappersAgree() {
        let key = Key128(high: 0x0123_4567_89AB_CDEF, low: 0xFEDC_BA98_7654_3210)
        let copy = Key128(high: key.high, low: key.low)
        #expect(key.hashValue == copy.hashValue)
        #expect(key._rawHashValue(seed: 42) == copy._rawHashValue(seed: 42))
        #expect(AccountID(key).hashValue == AccountID(copy).hashValue)
        #expect(LineageKey(key)._rawHashValue(seed: 7) == key._rawHashValue(seed: 7))
    }

    /// Pseudonyms issued close together share their first bytes (the log position) and differ in
    /// the rest; keyed hashes differ anywhere. Both must spread over a table's buckets.
    @Test func keysDifferingInOneWordSpreadOverBuckets() {
        let count = 1 << 14
        let mask = count - 1
        let samples: [[Key128]] = [
            (0..<count).map { Key128(high: 0x0000_0000_0001_0000, low: UInt64($0)) },
            (0..<count).map { Key128(high: UInt64($0) << 48, low: 0) },
            (0..<count).map { Key128(high: UInt64($0), low: UInt64($0)) },
        ]
        for keys in samples {
            let hashes = Set(keys.map { $0._rawHashValue(seed: 0x5EED) })
            #expect(hashes.count == count)
            // A table of `count` buckets takes the low bits: at least ~60% must be filled
            // (a uniform hash fills 1 - 1/e ≈ 63%).
            let buckets = Set(keys.map { $0._rawHashValue(seed: 0x5EED) & mask })
            #expect(buckets.count > count * 6 / 10)
        }
    }

    @Test func dictionariesFindEveryKey() {
        var table: [Key128: Int] = [:]
        for index in 0..<50_000 { table[Key128(high: UInt64(index) &* 0x9E37_79B9, low: UInt64(index))] = index }
        #expect(table.count == 50_000)
        #expect((0..<50_000).allSatisfy { table[Key128(high: UInt64($0) &* 0x9E37_79B9, low: UInt64($0))] == $0 })
        #expect(table[Key128(high: 1, low: 1)] == nil)
    }
}
