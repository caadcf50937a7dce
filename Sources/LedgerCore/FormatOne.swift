/// Storage format 1, read-only: one event per record, 32-byte keyed identifiers, each record
/// carrying its event id, previous hash and hash. Kept to upgrade format-1 stores and to verify
/// dispute bundles handed out over format-1 records.
///
/// ```
/// u8 format (1) | u64 sequence | i64 recordedAt | [32] eventId | u16 schemaVersion
/// [32] previousHash | u32 eventLength | event | [32] hash = SHA-256(previousHash ‖ every byte before it)
/// ```
///
/// Events decode into today's ``LedgerEvent``, whose keys are the first 16 bytes of the format-1
/// ones; the other 16 bytes (and the notification key format 2 no longer stores) are kept in
/// ``WideKeys`` so a format-1 record can be shown exactly as it was.
public enum FormatOne {
    public static let formatVersion: UInt8 = 1
    static let hashLength = 32

    /// The parts of a format-1 event's identifiers that format 2 does not keep.
    public struct WideKeys: Equatable, Sendable {
        /// Bytes 16 to 31 of the event's lineage key.
        public var lineageSuffix: Key128?
        /// Bytes 16 to 31 of the event's transaction key.
        public var transactionKeySuffix: Key128?
        /// The notification's keyed hash (format 2 identifies a notification by its command key).
        public var notificationKey: Digest32?

        public init(lineageSuffix: Key128? = nil, transactionKeySuffix: Key128? = nil, notificationKey: Digest32? = nil) {
            self.lineageSuffix = lineageSuffix
            self.transactionKeySuffix = transactionKeySuffix
            self.notificationKey = notificationKey
        }
    }

    /// A decoded format-1 record.
    public struct Record: Equatable, Sendable {
        public var sequence: UInt64
        /// The caller's time of the attempt (format 1 had one time).
        public var recordedAt: Timestamp
        public var eventId: Digest32
        public var schemaVersion: UInt16
        public var previousHash: Digest32
        public var hash: Digest32
        public var event: LedgerEvent
        public var wide: WideKeys

        public init(
            sequence: UInt64, recordedAt: Timestamp, eventId: Digest32, schemaVersion: UInt16, previousHash: Digest32, hash: Digest32,
            event: LedgerEvent, wide: WideKeys
        ) {
            self.sequence = sequence
            self.recordedAt = recordedAt
            self.eventId = eventId
            self.schemaVersion = schemaVersion
            self.previousHash = previousHash
            self.hash = hash
            self.event = event
            self.wide = wide
        }
    }

    /// Splits stored bytes into body and hash without decoding the event.
    public static func split(_ stored: [UInt8], sequence: UInt64) throws(RecordDecodingError) -> (body: ArraySlice<UInt8>, hash: Digest32) {
        guard stored.count > hashLength else {
            throw RecordDecodingError(sequence: sequence, reason: "truncated: \(stored.count) bytes")
        }
        let bodyEnd = stored.count - hashLength
        return (stored[..<bodyEnd], Digest32(Array(stored[bodyEnd...])) ?? .zero)
    }

    /// Decodes stored bytes (body ‖ hash). Checks structure, not the hash chain.
    public static func decode(_ stored: [UInt8], sequence: UInt64) throws(RecordDecodingError) -> Record {
        do throws(DecodingFailure) {
            return try ByteReader.reading(stored) { r throws(DecodingFailure) in
                guard stored.count > hashLength else { throw DecodingFailure("truncated: \(stored.count) bytes") }
                let format = try r.u8()
                guard format == formatVersion else { throw DecodingFailure("not a format-1 record (format \(format))") }
                let storedSequence = try r.u64()
                guard storedSequence == sequence else { throw DecodingFailure("envelope says sequence \(storedSequence)") }
                let recordedAt = try r.i64()
                let eventId = try r.digest()
                let schemaVersion = try r.u16()
                guard schemaVersion == 1 else { throw DecodingFailure("event schema version \(schemaVersion) is not format 1's") }
                let previousHash = try r.digest()
                let eventLength = Int(try r.u32())
                guard eventLength == r.remaining - hashLength else {
                    throw DecodingFailure("event length \(eventLength) does not match the \(r.remaining - hashLength) bytes stored")
                }
                var wide = WideKeys()
                let event = try decodeEvent(&r, wide: &wide)
                guard r.remaining == hashLength else { throw DecodingFailure("event ends \(r.remaining - hashLength) bytes early") }
                return Record(
                    sequence: sequence, recordedAt: recordedAt, eventId: eventId, schemaVersion: schemaVersion,
                    previousHash: previousHash, hash: try r.digest(), event: event, wide: wide)
            }
        } catch {
            throw RecordDecodingError(sequence: sequence, reason: error.message)
        }
    }

    // MARK: Events (u16 tag, then the fields; 32-byte lineages and digests)

    static func decodeEvent(_ r: inout ByteReader, wide: inout WideKeys) throws(DecodingFailure) -> LedgerEvent {
        func lineage(_ r: inout ByteReader) throws(DecodingFailure) -> LineageKey {
            let key = try r.key()
            wide.lineageSuffix = try r.key()
            return LineageKey(key)
        }
        func account(_ r: inout ByteReader) throws(DecodingFailure) -> AccountID { AccountID(try r.key()) }
        func transaction(_ r: inout ByteReader) throws(DecodingFailure) -> TransactionFacts {
            let key = try r.key()
            wide.transactionKeySuffix = try r.key()
            let productId = try r.string()
            let purchaseDate = try r.i64()
            let expiresDate = try r.optional { r throws(DecodingFailure) in try r.i64() }
            let revocationDate = try r.optional { r throws(DecodingFailure) in try r.i64() }
            let ownership = Ownership(appleValue: try r.string())
            let environment = try r.string()
            let signedDate = try r.i64()
            let raw = try r.u8()
            guard let provenance = Provenance(rawValue: raw) else { throw DecodingFailure("unknown provenance \(raw)") }
            return TransactionFacts(
                transactionKey: key, productId: productId, purchaseDate: purchaseDate, expiresDate: expiresDate,
                revocationDate: revocationDate, ownership: ownership, environment: environment, signedDate: signedDate,
                provenance: provenance)
        }
        func planSource(_ r: inout ByteReader) throws(DecodingFailure) -> PlanSource {
            switch try r.u8() {
            case 1: return .bound(try account(&r))
            case 2: return .tombstoned(try account(&r))
            case let other: throw DecodingFailure("unknown plan source \(other)")
            }
        }
        let tag = try r.u16()
        switch tag {
        case 1:
            let kindByte = try r.u8()
            guard let kind = SubmissionKind(rawValue: kindByte) else { throw DecodingFailure("unknown submission kind \(kindByte)") }
            let submitter = try r.optional { r throws(DecodingFailure) in try account(&r) }
            return .transactionSubmitted(
                TransactionSubmitted(kind: kind, account: submitter, lineage: try lineage(&r), transaction: try transaction(&r)))
        case 2:
            wide.notificationKey = try r.digest()
            let type = try r.string()
            let subtype = try r.optional { r throws(DecodingFailure) in try r.string() }
            let signedDate = try r.i64()
            let notified = try r.optional { r throws(DecodingFailure) in try lineage(&r) }
            let facts = try r.optional { r throws(DecodingFailure) in try transaction(&r) }
            return .notificationReceived(
                NotificationReceived(notificationType: type, subtype: subtype, signedDate: signedDate, lineage: notified, transaction: facts))
        case 3: return .accountDeletionRequested(account: try account(&r))
        case 10: return .lineageBound(lineage: try lineage(&r), account: try account(&r))
        case 11:
            return .entitlementGranted(
                EntitlementGranted(
                    lineage: try lineage(&r), account: try account(&r), productId: try r.string(),
                    expiresAt: try r.optional { r throws(DecodingFailure) in try r.i64() }))
        case 12:
            let ended = try lineage(&r)
            let holder = try account(&r)
            let raw = try r.u8()
            guard let reason = EntitlementEndReason(rawValue: raw) else { throw DecodingFailure("unknown end reason \(raw)") }
            return .entitlementEnded(lineage: ended, account: holder, reason: reason)
        case 13: return .entitlementRevoked(lineage: try lineage(&r), account: try account(&r), revokedAt: try r.i64())
        case 14: return .entitlementReinstated(lineage: try lineage(&r), account: try account(&r))
        case 15: return .lineageTombstoned(lineage: try lineage(&r), formerAccount: try account(&r))
        case 16: return .accountDeleted(account: try account(&r))
        case 20:
            return .staffEnrolled(
                StaffEnrolled(
                    staff: try r.string(), roles: StaffRoles(rawValue: try r.u8()), publicKey: try r.bytes(),
                    ownAccount: try r.optional { r throws(DecodingFailure) in try account(&r) },
                    enrolledBy: try r.optional { r throws(DecodingFailure) in try r.string() }, signature: try r.bytes()))
        case 21:
            return .staffRemoved(StaffRemoved(staff: try r.string(), removedBy: try r.string(), signature: try r.bytes()))
        case 22:
            let caseId = try r.string()
            let planned = try lineage(&r)
            let source = try planSource(&r)
            let plan = TransferPlan(
                caseId: caseId, lineage: planned, source: source, target: try account(&r), lineageVersion: try r.u64(),
                targetAuthentication: try r.string(), ownershipEvidence: try r.string(), reason: try r.string(),
                formatOneLineageSuffix: wide.lineageSuffix)
            return .transferRequested(
                TransferRequested(plan: plan, planDigest: try r.digest(), requestedBy: try r.string(), signature: try r.bytes()))
        case 23:
            return .transferApproved(
                TransferApproved(caseId: try r.string(), planDigest: try r.digest(), approvedBy: try r.string(), signature: try r.bytes()))
        case 24:
            return .transferApplied(
                TransferApplied(
                    caseId: try r.string(), planDigest: try r.digest(), lineage: try lineage(&r), source: try planSource(&r),
                    target: try account(&r), appliedBy: try r.string()))
        case 25:
            return .transferRefused(
                TransferRefused(caseId: try r.string(), step: try r.string(), staff: try r.string(), reason: try r.string()))
        case 30:
            let raw = try r.u8()
            guard let reason = DecisionReason(rawValue: raw) else { throw DecodingFailure("unknown decision reason \(raw)") }
            return .decisionIssued(
                DecisionIssued(
                    reason: reason, lineage: try r.optional { r throws(DecodingFailure) in try lineage(&r) },
                    account: try r.optional { r throws(DecodingFailure) in try account(&r) }))
        default:
            throw DecodingFailure("unknown event tag \(tag)")
        }
    }

    // MARK: Batches

    /// Groups format-1 records (in log order) into the commands that produced them, as format 2
    /// records one command: a fact (transaction, notification, deletion request) with the effects
    /// after it through its decision; a transfer's apply (`entitlement-ended (transferred)` then
    /// `transfer-applied`); every other support step alone.
    public static func batches<S: Sequence>(_ records: S) -> [[Record]] where S.Element == Record {
        var batcher = Batcher()
        var out: [[Record]] = []
        for record in records { out += batcher.add(record) }
        if let last = batcher.finish() { out.append(last) }
        return out
    }

    /// ``batches(_:)`` one record at a time, holding only the open batch.
    public struct Batcher {
        private var current: [Record] = []

        public init() {}

        /// Adds the next record; returns the batches it closes (at most two).
        public mutating func add(_ record: Record) -> [[Record]] {
            var closed: [[Record]] = []
            func close() {
                if !current.isEmpty { closed.append(current) }
                current = []
            }
            switch record.event {
            case .transactionSubmitted, .notificationReceived, .accountDeletionRequested, .staffEnrolled, .staffRemoved,
                .transferRequested, .transferApproved, .transferRefused, .storeUpgraded, .rosterChangeProposed:
                close()
                current = [record]
            case .entitlementEnded(_, _, .transferred):
                close()
                current = [record]
            case .transferApplied:
                if case .entitlementEnded(_, _, .transferred)? = current.last?.event, current.count == 1 {
                    current.append(record)
                } else {
                    close()
                    current = [record]
                }
                close()
            case .decisionIssued:
                current.append(record)
                close()
            case .lineageBound, .entitlementGranted, .entitlementEnded, .entitlementRevoked, .entitlementReinstated,
                .lineageTombstoned, .accountDeleted:
                current.append(record)
            }
            return closed
        }

        /// The batch still open after the last record, if any.
        public mutating func finish() -> [Record]? {
            defer { current = [] }
            return current.isEmpty ? nil : current
        }
    }
}
