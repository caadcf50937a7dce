/// One entry of the log: the envelope and its event.
public struct Record: Equatable, Sendable {
    /// Gapless, starting at 1.
    public var sequence: UInt64
    /// When the ledger recorded the event (the caller's time of the attempt, or the ledger clock).
    public var recordedAt: Timestamp
    /// Exact idempotency key.
    public var eventId: Digest32
    public var schemaVersion: UInt16
    /// Hash of the previous record (zero for the first).
    public var previousHash: Digest32
    /// SHA-256(previous hash ‖ body), computed by the store.
    public var hash: Digest32
    public var event: LedgerEvent

    public init(
        sequence: UInt64, recordedAt: Timestamp, eventId: Digest32, schemaVersion: UInt16 = EventCodec.schemaVersion,
        previousHash: Digest32, hash: Digest32, event: LedgerEvent
    ) {
        self.sequence = sequence
        self.recordedAt = recordedAt
        self.eventId = eventId
        self.schemaVersion = schemaVersion
        self.previousHash = previousHash
        self.hash = hash
        self.event = event
    }
}

extension BidirectionalCollection where Element == Record {
    /// The records up to and including the last one recorded at or before `time`: a prefix of the
    /// log, so it describes a state that existed even when callers supplied times out of order.
    /// (Filtering by time instead could apply an effect without the event it followed.)
    public func prefix(throughRecordedAt time: Timestamp) -> SubSequence {
        guard let last = lastIndex(where: { $0.recordedAt <= time }) else { return self[startIndex..<startIndex] }
        return self[...last]
    }
}

/// Why a stored record could not be decoded.
public struct RecordDecodingError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The sequence number the record was stored under.
    public var sequence: UInt64
    public var reason: String
    public var description: String { "record \(sequence) is corrupt: \(reason)" }
}

/// The versioned binary record format:
///
/// ```
/// u8  format (1) | u64 sequence | i64 recordedAt | [32] eventId | u16 schemaVersion
/// [32] previousHash | u32 eventLength | event (EventCodec) | [32] hash
/// ```
///
/// The hash is SHA-256 over the previous hash and every byte before the hash (the body).
public enum RecordCodec {
    public static let formatVersion: UInt8 = 1
    /// Bytes after the body.
    public static let hashLength = 32

    /// The body: everything the hash covers, given the event's encoding.
    public static func body(
        sequence: UInt64, recordedAt: Timestamp, eventId: Digest32, previousHash: Digest32, eventBytes: [UInt8],
        schemaVersion: UInt16 = EventCodec.schemaVersion
    ) -> [UInt8] {
        var w = ByteWriter()
        w.u8(formatVersion)
        w.u64(sequence)
        w.i64(recordedAt)
        w.raw(eventId.bytes)
        w.u16(schemaVersion)
        w.raw(previousHash.bytes)
        w.bytes(eventBytes)
        return w.output
    }

    /// The recorded time of stored bytes, read without decoding the event; nil when truncated.
    public static func recordedAt(of stored: [UInt8]) -> Timestamp? {
        var r = ByteReader(stored, offset: 9)
        return try? r.i64()
    }

    /// Splits stored bytes into body and hash without decoding the event.
    public static func split(_ stored: [UInt8], sequence: UInt64) throws(RecordDecodingError) -> (body: ArraySlice<UInt8>, hash: Digest32) {
        guard stored.count > hashLength else {
            throw RecordDecodingError(sequence: sequence, reason: "truncated: \(stored.count) bytes")
        }
        let bodyEnd = stored.count - hashLength
        return (stored[..<bodyEnd], Digest32(unchecked: Array(stored[bodyEnd...])))
    }

    /// Decodes stored bytes (body ‖ hash) in one pass. Checks structure, not the hash chain.
    public static func decode(_ stored: [UInt8], sequence: UInt64) throws(RecordDecodingError) -> Record {
        do throws(DecodingFailure) {
            guard stored.count > hashLength else { throw DecodingFailure("truncated: \(stored.count) bytes") }
            var r = ByteReader(stored)
            let format = try r.u8()
            guard format == formatVersion else { throw DecodingFailure("unknown record format \(format)") }
            let storedSequence = try r.u64()
            guard storedSequence == sequence else {
                throw DecodingFailure("envelope says sequence \(storedSequence)")
            }
            let recordedAt = try r.i64()
            let eventId = try r.digest()
            let schemaVersion = try r.u16()
            guard schemaVersion <= EventCodec.schemaVersion else {
                throw DecodingFailure("event schema version \(schemaVersion) is newer than this ledger (\(EventCodec.schemaVersion))")
            }
            let previousHash = try r.digest()
            let eventLength = Int(try r.u32())
            guard eventLength == r.remaining - hashLength else {
                throw DecodingFailure("event length \(eventLength) does not match the \(r.remaining - hashLength) bytes stored")
            }
            let event = try EventCodec.decode(from: &r)
            guard r.remaining == hashLength else { throw DecodingFailure("event ends \(r.remaining - hashLength) bytes early") }
            return Record(
                sequence: sequence, recordedAt: recordedAt, eventId: eventId, schemaVersion: schemaVersion,
                previousHash: previousHash, hash: try r.digest(), event: event)
        } catch {
            throw RecordDecodingError(sequence: sequence, reason: error.message)
        }
    }
}
