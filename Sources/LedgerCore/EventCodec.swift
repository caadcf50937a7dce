/// The binary encoding of ``LedgerEvent``: a u16 tag, then the payload's fields in declaration
/// order (integers big-endian, strings and byte strings u32-length-prefixed, optionals with a
/// presence byte). `docs/storage-format.md` lists every layout.
public enum EventCodec {
    /// The event schema version written into every envelope.
    public static let schemaVersion: UInt16 = 1

    public static func encode(_ event: LedgerEvent) -> [UInt8] {
        var w = ByteWriter()
        switch event {
        case .transactionSubmitted(let e):
            w.u16(1)
            w.u8(e.kind.rawValue)
            w.optional(e.account) { $0.account($1) }
            w.lineage(e.lineage)
            w.transaction(e.transaction)
        case .notificationReceived(let e):
            w.u16(2)
            w.raw(e.notificationKey.bytes)
            w.string(e.notificationType)
            w.optional(e.subtype) { $0.string($1) }
            w.i64(e.signedDate)
            w.optional(e.lineage) { $0.lineage($1) }
            w.optional(e.transaction) { $0.transaction($1) }
        case .accountDeletionRequested(let account):
            w.u16(3)
            w.account(account)
        case .lineageBound(let lineage, let account):
            w.u16(10)
            w.lineage(lineage)
            w.account(account)
        case .entitlementGranted(let e):
            w.u16(11)
            w.lineage(e.lineage)
            w.account(e.account)
            w.string(e.productId)
            w.optional(e.expiresAt) { $0.i64($1) }
        case .entitlementEnded(let lineage, let account, let reason):
            w.u16(12)
            w.lineage(lineage)
            w.account(account)
            w.u8(reason.rawValue)
        case .entitlementRevoked(let lineage, let account, let revokedAt):
            w.u16(13)
            w.lineage(lineage)
            w.account(account)
            w.i64(revokedAt)
        case .entitlementReinstated(let lineage, let account):
            w.u16(14)
            w.lineage(lineage)
            w.account(account)
        case .lineageTombstoned(let lineage, let account):
            w.u16(15)
            w.lineage(lineage)
            w.account(account)
        case .accountDeleted(let account):
            w.u16(16)
            w.account(account)
        case .staffEnrolled(let e):
            w.u16(20)
            w.string(e.staff)
            w.u8(e.roles.rawValue)
            w.bytes(e.publicKey)
            w.optional(e.ownAccount) { $0.account($1) }
            w.optional(e.enrolledBy) { $0.string($1) }
            w.bytes(e.signature)
        case .staffRemoved(let e):
            w.u16(21)
            w.string(e.staff)
            w.string(e.removedBy)
            w.bytes(e.signature)
        case .transferRequested(let e):
            w.u16(22)
            w.plan(e.plan)
            w.raw(e.planDigest.bytes)
            w.string(e.requestedBy)
            w.bytes(e.signature)
        case .transferApproved(let e):
            w.u16(23)
            w.string(e.caseId)
            w.raw(e.planDigest.bytes)
            w.string(e.approvedBy)
            w.bytes(e.signature)
        case .transferApplied(let e):
            w.u16(24)
            w.string(e.caseId)
            w.raw(e.planDigest.bytes)
            w.lineage(e.lineage)
            w.planSource(e.source)
            w.account(e.target)
            w.string(e.appliedBy)
        case .transferRefused(let e):
            w.u16(25)
            w.string(e.caseId)
            w.string(e.step)
            w.string(e.staff)
            w.string(e.reason)
        case .decisionIssued(let e):
            w.u16(30)
            w.u8(e.reason.rawValue)
            w.optional(e.lineage) { $0.lineage($1) }
            w.optional(e.account) { $0.account($1) }
        }
        return w.output
    }

    /// Decodes one event; every byte must be consumed.
    public static func decode(_ bytes: [UInt8]) throws(DecodingFailure) -> LedgerEvent {
        var r = ByteReader(bytes)
        let event = try decode(from: &r)
        try r.expectEnd()
        return event
    }

    public static func decode(from r: inout ByteReader) throws(DecodingFailure) -> LedgerEvent {
        let tag = try r.u16()
        switch tag {
        case 1:
            let kindByte = try r.u8()
            guard let kind = SubmissionKind(rawValue: kindByte) else { throw DecodingFailure("unknown submission kind \(kindByte)") }
            return .transactionSubmitted(
                TransactionSubmitted(
                    kind: kind, account: try r.optional { r throws(DecodingFailure) in try r.account() },
                    lineage: try r.lineage(), transaction: try r.transaction()))
        case 2:
            return .notificationReceived(
                NotificationReceived(
                    notificationKey: try r.digest(), notificationType: try r.string(),
                    subtype: try r.optional { r throws(DecodingFailure) in try r.string() }, signedDate: try r.i64(),
                    lineage: try r.optional { r throws(DecodingFailure) in try r.lineage() },
                    transaction: try r.optional { r throws(DecodingFailure) in try r.transaction() }))
        case 3: return .accountDeletionRequested(account: try r.account())
        case 10: return .lineageBound(lineage: try r.lineage(), account: try r.account())
        case 11:
            return .entitlementGranted(
                EntitlementGranted(
                    lineage: try r.lineage(), account: try r.account(), productId: try r.string(),
                    expiresAt: try r.optional { r throws(DecodingFailure) in try r.i64() }))
        case 12:
            let lineage = try r.lineage()
            let account = try r.account()
            let raw = try r.u8()
            guard let reason = EntitlementEndReason(rawValue: raw) else { throw DecodingFailure("unknown end reason \(raw)") }
            return .entitlementEnded(lineage: lineage, account: account, reason: reason)
        case 13: return .entitlementRevoked(lineage: try r.lineage(), account: try r.account(), revokedAt: try r.i64())
        case 14: return .entitlementReinstated(lineage: try r.lineage(), account: try r.account())
        case 15: return .lineageTombstoned(lineage: try r.lineage(), formerAccount: try r.account())
        case 16: return .accountDeleted(account: try r.account())
        case 20:
            return .staffEnrolled(
                StaffEnrolled(
                    staff: try r.string(), roles: StaffRoles(rawValue: try r.u8()), publicKey: try r.bytes(),
                    ownAccount: try r.optional { r throws(DecodingFailure) in try r.account() },
                    enrolledBy: try r.optional { r throws(DecodingFailure) in try r.string() }, signature: try r.bytes()))
        case 21:
            return .staffRemoved(StaffRemoved(staff: try r.string(), removedBy: try r.string(), signature: try r.bytes()))
        case 22:
            return .transferRequested(
                TransferRequested(
                    plan: try r.plan(), planDigest: try r.digest(), requestedBy: try r.string(), signature: try r.bytes()))
        case 23:
            return .transferApproved(
                TransferApproved(
                    caseId: try r.string(), planDigest: try r.digest(), approvedBy: try r.string(), signature: try r.bytes()))
        case 24:
            return .transferApplied(
                TransferApplied(
                    caseId: try r.string(), planDigest: try r.digest(), lineage: try r.lineage(), source: try r.planSource(),
                    target: try r.account(), appliedBy: try r.string()))
        case 25:
            return .transferRefused(
                TransferRefused(caseId: try r.string(), step: try r.string(), staff: try r.string(), reason: try r.string()))
        case 30:
            let raw = try r.u8()
            guard let reason = DecisionReason(rawValue: raw) else { throw DecodingFailure("unknown decision reason \(raw)") }
            return .decisionIssued(
                DecisionIssued(
                    reason: reason, lineage: try r.optional { r throws(DecodingFailure) in try r.lineage() },
                    account: try r.optional { r throws(DecodingFailure) in try r.account() }))
        default:
            throw DecodingFailure("unknown event tag \(tag)")
        }
    }
}

extension ByteWriter {
    public mutating func lineage(_ key: LineageKey) { raw(key.digest.bytes) }
    public mutating func account(_ account: AccountID) { raw(account.bytes) }

    mutating func transaction(_ t: TransactionFacts) {
        raw(t.transactionKey.bytes)
        string(t.productId)
        i64(t.purchaseDate)
        optional(t.expiresDate) { $0.i64($1) }
        optional(t.revocationDate) { $0.i64($1) }
        string(t.ownership.appleValue)
        string(t.environment)
        i64(t.signedDate)
        u8(t.provenance.rawValue)
    }

    mutating func planSource(_ source: PlanSource) {
        switch source {
        case .bound(let account):
            u8(1)
            self.account(account)
        case .tombstoned(let account):
            u8(2)
            self.account(account)
        }
    }

    mutating func plan(_ p: TransferPlan) {
        string(p.caseId)
        lineage(p.lineage)
        planSource(p.source)
        account(p.target)
        u64(p.lineageVersion)
        string(p.targetAuthentication)
        string(p.ownershipEvidence)
        string(p.reason)
    }
}

extension ByteReader {
    public mutating func lineage() throws(DecodingFailure) -> LineageKey { LineageKey(try digest()) }

    public mutating func account() throws(DecodingFailure) -> AccountID {
        guard let account = AccountID(try raw(16)) else { throw DecodingFailure("bad account pseudonym") }
        return account
    }

    mutating func transaction() throws(DecodingFailure) -> TransactionFacts {
        let key = try digest()
        let productId = try string()
        let purchaseDate = try i64()
        let expiresDate = try optional { r throws(DecodingFailure) in try r.i64() }
        let revocationDate = try optional { r throws(DecodingFailure) in try r.i64() }
        let ownership = Ownership(appleValue: try string())
        let environment = try string()
        let signedDate = try i64()
        let raw = try u8()
        guard let provenance = Provenance(rawValue: raw) else { throw DecodingFailure("unknown provenance \(raw)") }
        return TransactionFacts(
            transactionKey: key, productId: productId, purchaseDate: purchaseDate, expiresDate: expiresDate,
            revocationDate: revocationDate, ownership: ownership, environment: environment, signedDate: signedDate,
            provenance: provenance)
    }

    mutating func planSource() throws(DecodingFailure) -> PlanSource {
        switch try u8() {
        case 1: return .bound(try account())
        case 2: return .tombstoned(try account())
        case let other: throw DecodingFailure("unknown plan source \(other)")
        }
    }

    mutating func plan() throws(DecodingFailure) -> TransferPlan {
        TransferPlan(
            caseId: try string(), lineage: try lineage(), source: try planSource(), target: try account(),
            lineageVersion: try u64(), targetAuthentication: try string(), ownershipEvidence: try string(),
            reason: try string())
    }
}

extension TransferPlan {
    /// The bytes whose SHA-256 is the plan digest both staff members sign.
    public var canonicalBytes: [UInt8] {
        var w = ByteWriter()
        w.string("ownership-ledger/transfer-plan/v1")
        w.plan(self)
        return w.output
    }
}
