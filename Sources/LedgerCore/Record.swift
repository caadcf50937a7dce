/// One entry of the log: everything one decided command produced. Its fact first (what the
/// verifier submitted, or the support step), then the effects, then, for a submission, the decision.
public struct Record: Equatable, Sendable {
    /// Gapless, starting at 1: the record's position (its key in the log, not stored in its bytes;
    /// the hash chain covers it).
    public var sequence: UInt64
    /// When the ledger recorded it, from the ledger's clock (never the caller's), never earlier than
    /// the previous record's: "what the ledger knew at T" is a prefix of the log.
    public var recordedAt: Timestamp
    /// The business time of the attempt the caller gave (or the ledger clock when it gave none):
    /// what the decider judged expiry by.
    public var at: Timestamp
    /// The command's idempotency key: a retried submission has the same key.
    public var command: Key128
    /// 0 for the first decision of a command; n for its n-th decision again (a retry decided anew).
    public var attempt: UInt32
    public var events: [LedgerEvent]

    public init(
        sequence: UInt64, recordedAt: Timestamp, at: Timestamp, command: Key128, attempt: UInt32, events: [LedgerEvent]
    ) {
        self.sequence = sequence
        self.recordedAt = recordedAt
        self.at = at
        self.command = command
        self.attempt = attempt
        self.events = events
    }

    /// The decision the record issued, if it is a submission's.
    public var decision: DecisionIssued? {
        for case .decisionIssued(let decision) in events.reversed() { return decision }
        return nil
    }

    /// The lineage a submission's command belongs to: its fact's (a transaction's, or a notification's
    /// when it names one). Its idempotency entry is kept with that lineage's index entries, so one
    /// decision touches one lineage's part of the index; a command without one (a deletion, a support
    /// step) has an entry of its own.
    public var homeLineage: LineageKey? { Self.homeLineage(ofFact: events.first) }

    /// The home lineage of a record whose first event is `fact` (``homeLineage``).
    public static func homeLineage(ofFact fact: LedgerEvent?) -> LineageKey? {
        switch fact {
        case .transactionSubmitted(let e)?: e.lineage
        case .notificationReceived(let e)?: e.lineage
        default: nil
        }
    }

    /// Every lineage the record's events name, in order of first mention.
    public var lineages: [LineageKey] {
        var out: [LineageKey] = []
        for event in events {
            if let lineage = event.lineage, !out.contains(lineage) { out.append(lineage) }
        }
        return out
    }
}

/// Why a stored record could not be decoded.
public struct RecordDecodingError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The sequence number the record was stored under.
    public var sequence: UInt64
    public var reason: String

    public init(sequence: UInt64, reason: String) {
        self.sequence = sequence
        self.reason = reason
    }

    public var description: String { "record \(sequence) is corrupt: \(reason)" }
}

/// Storage format 2 of a record (`docs/storage-format.md`):
///
/// ```
/// u8      format = 2
/// u48     recordedAt               ms since the epoch, at a fixed offset: binary search by time reads only it
/// [16]    command                  the idempotency key, at a fixed offset
/// varint  zigzag(at − recordedAt)  the business time of the attempt
/// varint  attempt
/// …       events                   until the end (EventCodec)
/// ```
///
/// No hash is stored: the leaf hash is SHA-256(0x00 ‖ these bytes) and the chain links leaf hashes
/// (`LedgerStore`). The encoding is canonical: decoding accepts exactly the bytes `encode` writes.
public enum RecordCodec {
    public static let formatVersion: UInt8 = 2
    /// Offsets of the fixed-position fields.
    public static let recordedAtOffset = 1
    public static let commandOffset = 7
    static let headerLength = 23

    public static func encode(_ record: Record) -> [UInt8] {
        var w = ByteWriter(capacity: 160)
        w.u8(formatVersion)
        w.u48(UInt64(record.recordedAt))
        w.key(record.command)
        w.zigzag(record.at &- record.recordedAt)
        w.varint(UInt64(record.attempt))
        EventCodec.encode(record.events, at: record.at, into: &w)
        return w.output
    }

    /// The recorded time of stored bytes, read without decoding anything else; nil when they are
    /// not a format-2 record.
    public static func recordedAt(of stored: UnsafeRawBufferPointer) -> Timestamp? {
        guard stored.count >= headerLength, stored[0] == formatVersion else { return nil }
        var value: Int64 = 0
        for index in recordedAtOffset..<recordedAtOffset + 6 { value = value << 8 | Int64(stored[index]) }
        return value
    }

    /// The command key of stored bytes, read without decoding anything else.
    public static func command(of stored: UnsafeRawBufferPointer) -> Key128? {
        guard stored.count >= headerLength, stored[0] == formatVersion else { return nil }
        return Key128(loading: stored, at: commandOffset)
    }

    public static func decode(_ stored: [UInt8], sequence: UInt64) throws(RecordDecodingError) -> Record {
        let result: Result<Record, RecordDecodingError> = stored.withUnsafeBytes { raw in
            do throws(RecordDecodingError) {
                return .success(try decode(raw, sequence: sequence))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// Decodes stored bytes in one pass, checking every bound and that the encoding is canonical.
    public static func decode(_ stored: UnsafeRawBufferPointer, sequence: UInt64) throws(RecordDecodingError) -> Record {
        var events: [LedgerEvent] = []
        events.reserveCapacity(4)
        var record = try decode(stored, sequence: sequence, appendingEventsTo: &events, strings: nil)
        record.events = events
        return record
    }

    /// ``decode(_:sequence:)``, but the events are appended to `events` (nothing is appended when
    /// the bytes do not decode) and the record is returned without them; product ids come through
    /// `strings` when given.
    static func decode(
        _ stored: UnsafeRawBufferPointer, sequence: UInt64, appendingEventsTo events: inout [LedgerEvent], strings: DecodedStrings?
    ) throws(RecordDecodingError) -> Record {
        let start = events.count
        do throws(DecodingFailure) {
            var r = ByteReader(stored)
            let format = try r.u8()
            guard format == formatVersion else {
                throw DecodingFailure(
                    format == 1 ? "a format-1 record (this store must be upgraded: ledger upgrade)" : "unknown record format \(format)")
            }
            let recordedAt = Int64(try r.u48())
            let command = try r.key()
            let at = try EventCodec.offset(recordedAt, by: try r.zigzag())
            let attempt = try r.varint()
            guard attempt <= UInt64(UInt32.max) else { throw DecodingFailure("attempt \(attempt) is out of range") }
            try EventCodec.decode(from: &r, at: at, appendingTo: &events, strings: strings)
            return Record(sequence: sequence, recordedAt: recordedAt, at: at, command: command, attempt: UInt32(attempt), events: [])
        } catch {
            events.removeSubrange(start...)
            throw RecordDecodingError(sequence: sequence, reason: error.message)
        }
    }
}

/// Decodes the records of a log one after another (a replay), the events of many records into one
/// array and each distinct product id once: a record then costs almost no allocation. The records
/// and events are exactly what ``RecordCodec/decode(_:sequence:)`` gives. Not for sharing between
/// threads.
public struct RecordDecoder {
    private let strings = DecodedStrings()

    public init() {}

    /// Decodes stored bytes, appends the record's events to `events` (nothing when the bytes do not
    /// decode) and returns the record without them (its `events` empty).
    public func decode(
        _ stored: UnsafeRawBufferPointer, sequence: UInt64, appendingEventsTo events: inout [LedgerEvent]
    ) throws(RecordDecodingError) -> Record {
        try RecordCodec.decode(stored, sequence: sequence, appendingEventsTo: &events, strings: strings)
    }

    /// Forgets the product ids decoded so far: the records decoded next get strings of their own. A
    /// replay that hands batches of events to another thread calls it for each batch, so the two
    /// threads do not update the reference count of one string at the same time.
    public func forgetStrings() { strings.forget() }
}
