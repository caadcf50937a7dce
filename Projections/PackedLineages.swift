public import LedgerCore

/// The lineage states of a whole-log replay, packed: each is a fixed-size slot of plain values (56
/// bytes a lineage in the hash table with its key, against 104 for `[LineageKey: LineageState]`), so
/// one replay pass keeps twice the lineages in the same memory. Product ids are kept once each and
/// named by number; an entitlement's account is kept apart in the rare case it is not the binding's.
/// Reading a lineage gives back exactly the ``LineageState`` that was stored.
public struct PackedLineages: Sendable {
    struct Slot {
        /// The binding's account (the former owner's when tombstoned), else zero.
        var account: Key128
        var expiresAt: Int64
        var revokedAt: Int64
        var purchasedAt: Int64
        /// Index in ``PackedLineages/products``.
        var product: UInt32
        /// Bits 0–1 the binding (0 unbound, 1 bound, 2 tombstoned); 4 an entitlement; 8 the
        /// entitlement's account is not the binding's (it is in `otherAccounts`); 0x10 an expiry;
        /// 0x20 a revocation; 0x40 the caller's mark (``entry(_:)``); 0x80 a purchase date.
        var flags: UInt8
        /// The entitlement's end reason (0: not ended).
        var ended: UInt8
    }

    private var slots: [LineageKey: Slot] = [:]
    private var otherAccounts: [LineageKey: AccountID] = [:]
    private var products: [String] = []
    private var productNumbers: [String: UInt32] = [:]
    /// The number of the product packed last.
    private var lastProduct: UInt32 = 0

    public init() {}

    public var count: Int { slots.count }

    /// The lineages held, sorted.
    public func sortedKeys() -> [LineageKey] { slots.keys.sorted() }

    /// Visits every lineage held, in no particular order.
    public func forEach(_ body: (LineageKey, LineageState) throws -> Void) rethrows {
        for (lineage, slot) in slots { try body(lineage, unpack(lineage, slot)) }
    }

    /// Makes room for `count` lineages at once.
    public mutating func reserveCapacity(_ count: Int) { slots.reserveCapacity(count) }

    /// The state of `lineage` (set through the subscript: unmarked).
    public subscript(lineage: LineageKey) -> LineageState? {
        get { slots[lineage].map { unpack(lineage, $0) } }
        set { set(lineage, newValue, marked: false) }
    }

    /// The state of `lineage` and the mark its caller keeps with it (one bit, in the slot: the lean
    /// ``InvariantChecker`` marks a lineage its binding's account counts as bound).
    public func entry(_ lineage: LineageKey) -> (state: LineageState, marked: Bool)? {
        slots[lineage].map { (unpack(lineage, $0), $0.flags & Self.mark != 0) }
    }

    /// Stores `state` (nil: removes the lineage) with its mark.
    public mutating func set(_ lineage: LineageKey, _ state: LineageState?, marked: Bool) {
        set(lineage, plain: state.map { plain(of: $0) }, marked: marked)
    }

    private static let mark: UInt8 = 0x40

    private func unpack(_ lineage: LineageKey, _ slot: Slot) -> LineageState {
        let plain = self.plain(lineage, slot)
        return LineageState(
            binding: plain.binding,
            entitlement: plain.entitlement.map {
                Entitlement(
                    account: $0.account, productId: products[Int($0.product)], expiresAt: $0.expiresAt, revokedAt: $0.revokedAt,
                    endedBecause: $0.endedBecause, purchasedAt: $0.purchasedAt)
            })
    }

    /// `state` with its product numbered.
    private mutating func plain(of state: LineageState) -> PlainLineage {
        PlainLineage(
            binding: state.binding,
            entitlement: state.entitlement.map {
                PlainLineage.Entitlement(
                    account: $0.account, product: number(of: $0.productId), expiresAt: $0.expiresAt, revokedAt: $0.revokedAt,
                    endedBecause: $0.endedBecause, purchasedAt: $0.purchasedAt)
            })
    }

    /// The state of `lineage` as plain values, and its mark (``entry(_:)``).
    public func plainEntry(_ lineage: LineageKey) -> (state: PlainLineage, marked: Bool)? {
        slots[lineage].map { (plain(lineage, $0), $0.flags & Self.mark != 0) }
    }

    /// Stores `state` (nil: removes the lineage) with its mark; its product is a number of ``productNumber(of:)``.
    public mutating func set(_ lineage: LineageKey, plain state: PlainLineage?, marked: Bool) {
        if !otherAccounts.isEmpty { otherAccounts[lineage] = nil }
        slots[lineage] = state.map {
            var slot = pack(lineage, $0)
            if marked { slot.flags |= Self.mark }
            return slot
        }
    }

    private func plain(_ lineage: LineageKey, _ slot: Slot) -> PlainLineage {
        let owner = AccountID(slot.account)
        let binding: Binding =
            switch slot.flags & 3 {
            case 1: .bound(owner)
            case 2: .tombstoned(formerAccount: owner)
            default: .unbound
            }
        guard slot.flags & 4 != 0 else { return PlainLineage(binding: binding) }
        return PlainLineage(
            binding: binding,
            entitlement: PlainLineage.Entitlement(
                account: slot.flags & 8 == 0 ? owner : otherAccounts[lineage] ?? owner, product: slot.product,
                expiresAt: slot.flags & 0x10 == 0 ? nil : slot.expiresAt, revokedAt: slot.flags & 0x20 == 0 ? nil : slot.revokedAt,
                endedBecause: EntitlementEndReason(rawValue: slot.ended), purchasedAt: slot.flags & 0x80 == 0 ? nil : slot.purchasedAt))
    }

    private mutating func pack(_ lineage: LineageKey, _ state: PlainLineage) -> Slot {
        var slot = Slot(account: .zero, expiresAt: 0, revokedAt: 0, purchasedAt: 0, product: 0, flags: 0, ended: 0)
        var owner: AccountID?
        switch state.binding {
        case .unbound: break
        case .bound(let account): (slot.flags, owner) = (1, account)
        case .tombstoned(let account): (slot.flags, owner) = (2, account)
        }
        if let owner { slot.account = owner.key }
        if let entitlement = state.entitlement {
            slot.flags |= 4
            if entitlement.account != owner {
                slot.flags |= 8
                otherAccounts[lineage] = entitlement.account
            }
            slot.product = entitlement.product
            if let expiresAt = entitlement.expiresAt { (slot.flags, slot.expiresAt) = (slot.flags | 0x10, expiresAt) }
            if let revokedAt = entitlement.revokedAt { (slot.flags, slot.revokedAt) = (slot.flags | 0x20, revokedAt) }
            if let purchasedAt = entitlement.purchasedAt { (slot.flags, slot.purchasedAt) = (slot.flags | 0x80, purchasedAt) }
            slot.ended = entitlement.endedBecause?.rawValue ?? 0
        }
        return slot
    }

    /// The number ``PlainLineage`` names `product` by (numbered when new).
    public mutating func productNumber(of product: String) -> UInt32 { number(of: product) }

    /// The number of a product id, numbering it when new (the one packed last is checked first: a
    /// replay mostly sees the same few).
    private mutating func number(of product: String) -> UInt32 {
        if Int(lastProduct) < products.count, products[Int(lastProduct)] == product { return lastProduct }
        if let number = productNumbers[product] {
            lastProduct = number
            return number
        }
        lastProduct = UInt32(products.count)
        // A copy of its own: the strings a decoder hands out are shared by every event it decodes, and
        // a replay reads them on another thread; retaining one object from both threads makes the two
        // cores fight over its reference count.
        let own = String(decoding: Array(product.utf8), as: UTF8.self)
        products.append(own)
        productNumbers[own] = lastProduct
        return lastProduct
    }
}

/// A lineage's state as ``PackedLineages`` keeps it, in plain values: ``LineageState`` with its
/// product id by number (``PackedLineages/productNumber(of:)``), nothing reference-counted.
public struct PlainLineage: Equatable, Sendable {
    public struct Entitlement: Equatable, Sendable {
        public var account: AccountID
        public var product: UInt32
        public var expiresAt: Timestamp?
        public var revokedAt: Timestamp?
        public var endedBecause: EntitlementEndReason?
        public var purchasedAt: Timestamp?

        public init(
            account: AccountID, product: UInt32, expiresAt: Timestamp?, revokedAt: Timestamp? = nil, endedBecause: EntitlementEndReason? = nil,
            purchasedAt: Timestamp? = nil
        ) {
            (self.account, self.product, self.expiresAt, self.revokedAt, self.endedBecause) = (account, product, expiresAt, revokedAt, endedBecause)
            self.purchasedAt = purchasedAt
        }
    }
    public var binding: Binding
    public var entitlement: Entitlement?

    public init(binding: Binding = .unbound, entitlement: Entitlement? = nil) {
        self.binding = binding
        self.entitlement = entitlement
    }

    /// As ``LineageState/awaitsRestore``.
    public var awaitsRestore: Bool {
        guard case .bound = binding else { return false }
        return entitlement.map { $0.endedBecause == .transferred } ?? true
    }
}
