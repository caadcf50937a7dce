public import LedgerCore

/// The persisted form of ``LedgerState``: one key-value entry per lineage, live account,
/// deleted account, staff member and transfer case. A store writes only the entries a batch
/// changed; `rebuild` recomputes every entry from the log and compares.
///
/// Keys: `L`‖lineage(32), `A`‖account(16), `D`‖account(16), `S`‖staff id, `T`‖case id.
public enum ReadModel {
    public typealias Entries = [[UInt8]: [UInt8]]

    public static func lineageKey(_ lineage: LineageKey) -> [UInt8] { [0x4C] + lineage.digest.bytes }
    public static func accountKey(_ account: AccountID) -> [UInt8] { [0x41] + account.bytes }
    public static func deletedKey(_ account: AccountID) -> [UInt8] { [0x44] + account.bytes }
    public static func staffKey(_ staff: StaffID) -> [UInt8] { [0x53] + Array(staff.utf8) }
    public static func transferKey(_ caseId: String) -> [UInt8] { [0x54] + Array(caseId.utf8) }
    /// The prefix of every staff entry.
    public static let staffPrefix: [UInt8] = [0x53]

    /// Every entry of `state`.
    public static func entries(of state: LedgerState) -> Entries {
        var out = Entries()
        for (lineage, value) in state.lineages { out[lineageKey(lineage)] = encode(value) }
        for (account, lineages) in state.accountLineages {
            var w = ByteWriter()
            w.u32(UInt32(lineages.count))
            for lineage in lineages.sorted() { w.raw(lineage.digest.bytes) }
            out[accountKey(account)] = w.output
        }
        for account in state.deletedAccounts { out[deletedKey(account)] = [1] }
        for (staff, member) in state.staff {
            var w = ByteWriter()
            w.u8(member.roles.rawValue)
            w.bytes(member.publicKey)
            w.optional(member.ownAccount) { $0.raw($1.bytes) }
            out[staffKey(staff)] = w.output
        }
        for (caseId, transfer) in state.transfers {
            var w = ByteWriter()
            w.raw(EventCodec.encode(.transferRequested(transfer.request)))
            w.optional(transfer.approval) { $0.bytes(EventCodec.encode(.transferApproved($1))) }
            w.bool(transfer.applied)
            out[transferKey(caseId)] = w.output
        }
        return out
    }

    /// Loads entries into `state` (the inverse of ``entries(of:)``).
    public static func load(_ entries: some Sequence<([UInt8], [UInt8])>, into state: inout LedgerState) throws(DecodingFailure) {
        for (key, value) in entries {
            guard let kind = key.first else { throw DecodingFailure("empty read-model key") }
            let id = Array(key.dropFirst())
            var r = ByteReader(value)
            switch kind {
            case 0x4C:
                guard let digest = Digest32(id) else { throw DecodingFailure("bad lineage read-model key") }
                state.lineages[LineageKey(digest)] = try decodeLineage(&r)
            case 0x41:
                guard let account = AccountID(id) else { throw DecodingFailure("bad account read-model key") }
                let count = try r.u32()
                var set = Set<LineageKey>()
                for _ in 0..<count { set.insert(LineageKey(try r.digest())) }
                state.accountLineages[account] = set
            case 0x44:
                guard let account = AccountID(id) else { throw DecodingFailure("bad deleted-account read-model key") }
                state.deletedAccounts.insert(account)
                _ = try r.u8()
            case 0x53:
                let roles = StaffRoles(rawValue: try r.u8())
                let publicKey = try r.bytes()
                let own = try r.optional { r throws(DecodingFailure) in try r.account() }
                state.staff[String(decoding: id, as: UTF8.self)] = StaffMember(roles: roles, publicKey: publicKey, ownAccount: own)
            case 0x54:
                guard case .transferRequested(let request) = try EventCodec.decode(from: &r) else {
                    throw DecodingFailure("transfer read model does not start with a request")
                }
                let approval = try r.optional { r throws(DecodingFailure) -> TransferApproved in
                    guard case .transferApproved(let a) = try EventCodec.decode(try r.bytes()) else {
                        throw DecodingFailure("transfer read model holds a bad approval")
                    }
                    return a
                }
                state.transfers[String(decoding: id, as: UTF8.self)] = TransferCase(
                    request: request, approval: approval, applied: try r.bool())
            default:
                throw DecodingFailure("unknown read-model key kind \(kind)")
            }
            try r.expectEnd()
        }
    }

    static func encode(_ state: LineageState) -> [UInt8] {
        var w = ByteWriter()
        switch state.binding {
        case .unbound: w.u8(0)
        case .bound(let account):
            w.u8(1)
            w.raw(account.bytes)
        case .tombstoned(let account):
            w.u8(2)
            w.raw(account.bytes)
        }
        w.optional(state.entitlement) { w, e in
            w.raw(e.account.bytes)
            w.string(e.productId)
            w.optional(e.expiresAt) { $0.i64($1) }
            w.optional(e.revokedAt) { $0.i64($1) }
            w.optional(e.endedBecause) { $0.u8($1.rawValue) }
        }
        return w.output
    }

    static func decodeLineage(_ r: inout ByteReader) throws(DecodingFailure) -> LineageState {
        let binding: Binding
        switch try r.u8() {
        case 0: binding = .unbound
        case 1: binding = .bound(try r.account())
        case 2: binding = .tombstoned(formerAccount: try r.account())
        case let other: throw DecodingFailure("unknown binding kind \(other)")
        }
        let entitlement = try r.optional { r throws(DecodingFailure) -> Entitlement in
            let account = try r.account()
            let productId = try r.string()
            let expiresAt = try r.optional { r throws(DecodingFailure) in try r.i64() }
            let revokedAt = try r.optional { r throws(DecodingFailure) in try r.i64() }
            let ended = try r.optional { r throws(DecodingFailure) -> EntitlementEndReason in
                let raw = try r.u8()
                guard let reason = EntitlementEndReason(rawValue: raw) else { throw DecodingFailure("unknown end reason \(raw)") }
                return reason
            }
            return Entitlement(account: account, productId: productId, expiresAt: expiresAt, revokedAt: revokedAt, endedBecause: ended)
        }
        return LineageState(binding: binding, entitlement: entitlement)
    }
}

extension ReadModel {
    /// A readable name for a read-model key (`lineage 3fa2…`, `staff alice`).
    public static func describe(_ key: [UInt8]) -> String {
        let id = Array(key.dropFirst())
        switch key.first {
        case 0x4C: return "lineage \(id.hex)"
        case 0x41: return "account \(id.hex)"
        case 0x44: return "deleted account \(id.hex)"
        case 0x53: return "staff \(String(decoding: id, as: UTF8.self))"
        case 0x54: return "transfer case \(String(decoding: id, as: UTF8.self))"
        default: return "entry \(key.hex)"
        }
    }
}
