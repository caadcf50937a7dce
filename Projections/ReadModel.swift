public import LedgerCore

/// The persisted form of ``LedgerState``: one key-value entry per lineage, deleted account, staff
/// member and transfer case. A store writes only the entries a group of records changed; `rebuild`
/// recomputes every entry from the log and compares.
///
/// Keys: `L`‖lineage(16), `D`‖account(16), `S`‖staff id, `T`‖case id. The lineages bound to an
/// account are not a read model: the `account-lineages` index lists every lineage ever bound to the
/// account, and the `L` entries tell which still are (so binding one more costs O(log n)).
public enum ReadModel {
    public typealias Entries = [[UInt8]: [UInt8]]

    public static let lineagePrefix: UInt8 = 0x4C
    public static let deletedPrefix: UInt8 = 0x44
    public static let staffPrefix: UInt8 = 0x53
    public static let transferPrefix: UInt8 = 0x54

    public static func lineageKey(_ lineage: LineageKey) -> [UInt8] { [lineagePrefix] + lineage.bytes }
    public static func deletedKey(_ account: AccountID) -> [UInt8] { [deletedPrefix] + account.bytes }
    public static func staffKey(_ staff: StaffID) -> [UInt8] { [staffPrefix] + Array(staff.utf8) }
    public static func transferKey(_ caseId: String) -> [UInt8] { [transferPrefix] + Array(caseId.utf8) }

    /// Every entry of `state`.
    public static func entries(of state: LedgerState) -> Entries {
        var out = Entries()
        for (lineage, value) in state.lineages { out[lineageKey(lineage)] = encode(value) }
        for account in state.deletedAccounts { out[deletedKey(account)] = [] }
        for (staff, member) in state.staff { out[staffKey(staff)] = encode(member) }
        for (caseId, transfer) in state.transfers { out[transferKey(caseId)] = encode(transfer) }
        return out
    }

    /// Every entry of a lean replay's state, whose lineages are `lineages`
    /// (``InvariantChecker/leanLineages``), in no particular order and without building them all:
    /// what `verify` hashes to compare with the persisted read models.
    public static func forEachEntry(of state: LedgerState, lineages: PackedLineages, _ body: ([UInt8], [UInt8]) throws -> Void) rethrows {
        for account in state.deletedAccounts { try body(deletedKey(account), []) }
        try lineages.forEach { try body(lineageKey($0), encode($1)) }
        for (staff, member) in state.staff { try body(staffKey(staff), encode(member)) }
        for (caseId, transfer) in state.transfers { try body(transferKey(caseId), encode(transfer)) }
    }

    /// The entries of a state in key order, without building them all: the deleted accounts and the
    /// lineages are sorted once (16 bytes each) and each entry is encoded when it is visited. What
    /// `verify` walks beside the persisted read models.
    public struct OrderedEntries: Sendable {
        let state: LedgerState
        /// The lineages' states when packed (a lean replay's), else nil: they are `state`'s.
        let packed: PackedLineages?
        let deleted: [AccountID]
        let lineages: [LineageKey]
        /// Staff members and transfer cases (few), encoded and sorted.
        let small: [([UInt8], [UInt8])]

        public init(_ state: LedgerState) { self.init(state, packed: nil) }

        /// The entries of a lean replay's state, whose lineages are `lineages` (``InvariantChecker/leanLineages``).
        public init(_ state: LedgerState, lineages: PackedLineages) { self.init(state, packed: lineages) }

        private init(_ state: LedgerState, packed: PackedLineages?) {
            self.state = state
            self.packed = packed
            deleted = state.deletedAccounts.sorted()
            lineages = packed?.sortedKeys() ?? state.lineages.keys.sorted()
            var partial = LedgerState()
            partial.staff = state.staff
            partial.transfers = state.transfers
            small = ReadModel.entries(of: partial).sorted { $0.key.lexicographicallyPrecedes($1.key) }.map { ($0.key, $0.value) }
        }

        public var count: Int { deleted.count + lineages.count + small.count }

        /// Visits the entries whose key is `start` or after, in key order (`D` < `L` < `S` < `T`),
        /// until `body` returns false.
        public func forEach(from start: [UInt8], _ body: ([UInt8], [UInt8]) throws -> Bool) rethrows {
            func first<T: Comparable>(_ sorted: [T], _ prefix: UInt8, _ key: (T) -> [UInt8]) -> Int {
                guard let kind = start.first else { return 0 }
                if kind < prefix { return 0 }
                if kind > prefix { return sorted.count }
                var (low, high) = (0, sorted.count)
                while low < high {
                    let middle = (low + high) / 2
                    if key(sorted[middle]).lexicographicallyPrecedes(start) { low = middle + 1 } else { high = middle }
                }
                return low
            }
            for account in deleted[first(deleted, deletedPrefix, deletedKey)...] {
                guard try body(deletedKey(account), []) else { return }
            }
            for lineage in lineages[first(lineages, lineagePrefix, lineageKey)...] {
                let value = if let packed { packed[lineage] } else { state.lineages[lineage] }
                guard try body(lineageKey(lineage), encode(value ?? LineageState())) else { return }
            }
            for (key, value) in small where !key.lexicographicallyPrecedes(start) {
                guard try body(key, value) else { return }
            }
        }
    }

    /// Loads entries into `state` (the inverse of ``entries(of:)``).
    public static func load(_ entries: some Sequence<([UInt8], [UInt8])>, into state: inout LedgerState) throws(DecodingFailure) {
        for (key, value) in entries {
            guard let kind = key.first else { throw DecodingFailure("empty read-model key") }
            let id = Array(key.dropFirst())
            switch kind {
            case lineagePrefix:
                guard let lineage = Key128(id).map(LineageKey.init) else { throw DecodingFailure("bad lineage read-model key") }
                state.lineages[lineage] = try decodeLineage(value)
            case deletedPrefix:
                guard let account = AccountID(id), value.isEmpty else { throw DecodingFailure("bad deleted-account read-model entry") }
                state.deletedAccounts.insert(account)
            case staffPrefix:
                state.staff[String(decoding: id, as: UTF8.self)] = try decodeStaff(value)
            case transferPrefix:
                state.transfers[String(decoding: id, as: UTF8.self)] = try decodeTransfer(value)
            default:
                throw DecodingFailure("unknown read-model key kind \(kind)")
            }
        }
    }

    // MARK: Lineage

    /// u8 flags (bits 0–1 binding: 0 unbound, 1 bound, 2 tombstoned; 4 entitlement; 8 the
    /// entitlement's account is the binding's; 0x10 expiry; 0x20 revocation; 0x40 an end reason or a
    /// purchase date; 0x80 is never set: the stored form's marker) ‖ [account(16)] ‖ [entitlement:
    /// [account(16)] ‖ varint-length product ‖ [zigzag expiry] ‖ [zigzag revocation] ‖ [u8: the end
    /// reason (0: not ended) | 0x80 a purchase date, never 0] ‖ [zigzag purchase date]].
    public static func encode(_ state: LineageState) -> [UInt8] {
        var w = ByteWriter(capacity: 64)
        var flags: UInt8
        let bound: AccountID?
        switch state.binding {
        case .unbound: (flags, bound) = (0, nil)
        case .bound(let account): (flags, bound) = (1, account)
        case .tombstoned(let account): (flags, bound) = (2, account)
        }
        if let e = state.entitlement {
            flags |= 4 | (e.account == bound ? 8 : 0) | (e.expiresAt == nil ? 0 : 0x10) | (e.revokedAt == nil ? 0 : 0x20)
            flags |= e.endedBecause == nil && e.purchasedAt == nil ? 0 : 0x40
        }
        w.u8(flags)
        if let bound { w.key(bound.key) }
        if let e = state.entitlement {
            if e.account != bound { w.key(e.account.key) }
            w.shortString(e.productId)
            if let expires = e.expiresAt { w.zigzag(expires) }
            if let revoked = e.revokedAt { w.zigzag(revoked) }
            if e.endedBecause != nil || e.purchasedAt != nil {
                w.u8((e.endedBecause?.rawValue ?? 0) | (e.purchasedAt == nil ? 0 : 0x80))
            }
            if let purchased = e.purchasedAt { w.zigzag(purchased) }
        }
        return w.output
    }

    public static func decodeLineage(_ value: [UInt8]) throws(DecodingFailure) -> LineageState {
        try ByteReader.reading(value) { r throws(DecodingFailure) in
            let flags = try r.u8()
            guard flags & 0x80 == 0, flags & 3 != 3, flags & 4 != 0 || flags & 0x78 == 0 else {
                throw DecodingFailure("bad lineage read-model flags \(flags)")
            }
            let binding: Binding
            switch flags & 3 {
            case 0: binding = .unbound
            case 1: binding = .bound(AccountID(try r.key()))
            default: binding = .tombstoned(formerAccount: AccountID(try r.key()))
            }
            var entitlement: Entitlement?
            if flags & 4 != 0 {
                let account: AccountID
                if flags & 8 != 0 {
                    guard let bound = binding.account else { throw DecodingFailure("entitlement account refers to no binding") }
                    account = bound
                } else {
                    account = AccountID(try r.key())
                }
                let product = try r.shortString()
                let expires = flags & 0x10 == 0 ? nil : try r.zigzag()
                let revoked = flags & 0x20 == 0 ? nil : try r.zigzag()
                var ended: EntitlementEndReason?
                var purchased: Int64?
                if flags & 0x40 != 0 {
                    let byte = try r.u8()
                    let raw = byte & 0x7F
                    guard byte != 0 else { throw DecodingFailure("an entitlement's end byte says nothing") }
                    if raw != 0 {
                        guard let reason = EntitlementEndReason(rawValue: raw) else { throw DecodingFailure("unknown end reason \(raw)") }
                        ended = reason
                    }
                    if byte & 0x80 != 0 { purchased = try r.zigzag() }
                }
                entitlement = Entitlement(
                    account: account, productId: product, expiresAt: expires, revokedAt: revoked, endedBecause: ended, purchasedAt: purchased)
            }
            try r.expectEnd()
            return LineageState(binding: binding, entitlement: entitlement)
        }
    }

    // MARK: Staff and transfer cases

    /// u8 roles ‖ varint-length public key ‖ optional account(16) ‖ optional varint enrolledAfter.
    static func encode(_ member: StaffMember) -> [UInt8] {
        var w = ByteWriter()
        w.u8(member.roles.rawValue)
        w.shortBytes(member.publicKey)
        w.optional(member.ownAccount) { $0.key($1.key) }
        w.optional(member.enrolledAfter) { $0.varint($1) }
        return w.output
    }

    static func decodeStaff(_ value: [UInt8]) throws(DecodingFailure) -> StaffMember {
        try ByteReader.reading(value) { r throws(DecodingFailure) in
            let member = StaffMember(
                roles: StaffRoles(rawValue: try r.u8()), publicKey: try r.shortBytes(),
                ownAccount: try r.optional { r throws(DecodingFailure) in AccountID(try r.key()) },
                enrolledAfter: try r.optional { r throws(DecodingFailure) in try r.varint() })
            try r.expectEnd()
            return member
        }
    }

    /// bool applied ‖ varint-length request event ‖ optional varint-length approval event (each as
    /// `EventCodec` writes a record's only event, at time 0) ‖ optional varint approverEnrolledAfter.
    static func encode(_ transfer: TransferCase) -> [UInt8] {
        func event(_ event: LedgerEvent) -> [UInt8] {
            var w = ByteWriter()
            EventCodec.encode([event], at: 0, into: &w)
            return w.output
        }
        var w = ByteWriter()
        w.bool(transfer.applied)
        w.shortBytes(event(.transferRequested(transfer.request)))
        w.optional(transfer.approval) { $0.shortBytes(event(.transferApproved($1))) }
        w.optional(transfer.approverEnrolledAfter) { $0.varint($1) }
        return w.output
    }

    static func decodeTransfer(_ value: [UInt8]) throws(DecodingFailure) -> TransferCase {
        func event(_ bytes: [UInt8]) throws(DecodingFailure) -> LedgerEvent {
            let events = try ByteReader.reading(bytes) { r throws(DecodingFailure) in try EventCodec.decode(from: &r, at: 0) }
            guard events.count == 1 else { throw DecodingFailure("transfer read model holds \(events.count) events") }
            return events[0]
        }
        return try ByteReader.reading(value) { r throws(DecodingFailure) in
            let applied = try r.bool()
            guard case .transferRequested(let request) = try event(try r.shortBytes()) else {
                throw DecodingFailure("transfer read model does not hold a request")
            }
            let approval = try r.optional { r throws(DecodingFailure) -> TransferApproved in
                guard case .transferApproved(let approval) = try event(try r.shortBytes()) else {
                    throw DecodingFailure("transfer read model holds a bad approval")
                }
                return approval
            }
            let approverEnrolledAfter = try r.optional { r throws(DecodingFailure) in try r.varint() }
            try r.expectEnd()
            return TransferCase(request: request, approval: approval, approverEnrolledAfter: approverEnrolledAfter, applied: applied)
        }
    }
}

extension Binding {
    /// The account a binding names (the owner, or a tombstone's former owner).
    public var account: AccountID? {
        switch self {
        case .unbound: nil
        case .bound(let account), .tombstoned(let account): account
        }
    }
}

extension ReadModel {
    /// A readable name for a read-model key (`lineage 3fa2…`, `staff alice`).
    public static func describe(_ key: [UInt8]) -> String {
        let id = Array(key.dropFirst())
        switch key.first {
        case lineagePrefix: return "lineage \(id.hex)"
        case deletedPrefix: return "deleted account \(id.hex)"
        case staffPrefix: return "staff \(String(decoding: id, as: UTF8.self))"
        case transferPrefix: return "transfer case \(String(decoding: id, as: UTF8.self))"
        default: return "entry \(key.hex)"
        }
    }
}
