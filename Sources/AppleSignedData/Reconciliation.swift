public import StrictJSON

/// An App Store Server API response to reconcile against: **Get All Subscription Statuses**
/// (`{environment, bundleId, appAppleId, data: [{subscriptionGroupIdentifier, lastTransactions: [{originalTransactionId,
/// status, signedTransactionInfo, signedRenewalInfo}]}]}`) or **Get Transaction History**
/// (`{signedTransactions: [...], bundleId, environment, hasMore, revision}`). Unknown fields are ignored.
///
/// Only the signed items are trusted; the unsigned envelope fields are kept for information.
public struct ReconciliationResponse: Sendable, Equatable {
    public enum Kind: String, Sendable { case subscriptionStatuses, transactionHistory }

    /// One signed item to verify.
    public struct Item: Sendable, Equatable {
        public var signedTransactionInfo: String
        public var signedRenewalInfo: String?
        /// Subscription status (unsigned, from the envelope); nil for transaction history.
        public var status: Int?
        public var originalTransactionId: String?
        public var subscriptionGroupIdentifier: String?

        public init(
            signedTransactionInfo: String, signedRenewalInfo: String? = nil, status: Int? = nil,
            originalTransactionId: String? = nil, subscriptionGroupIdentifier: String? = nil
        ) {
            self.signedTransactionInfo = signedTransactionInfo
            self.signedRenewalInfo = signedRenewalInfo
            self.status = status
            self.originalTransactionId = originalTransactionId
            self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
        }
    }

    public var kind: Kind
    public var environment: String?
    public var bundleId: String?
    public var appAppleId: Int64?
    public var hasMore: Bool?
    public var revision: String?
    public var items: [Item]

    /// Parses either response shape; anything else is `.invalidPayload`.
    public init(jsonData: some Collection<UInt8>) throws(VerificationError) {
        try self.init(JSONFields(parsing: jsonData, context: "response"))
    }

    /// Parses either response shape from a JSON object.
    public init(json: JSONMembers) throws(VerificationError) {
        try self.init(JSONFields(json, context: "response"))
    }

    /// Parses either response shape from a JSON object read in place.
    public init(view: JSONView) throws(VerificationError) {
        try self.init(JSONFields(view, context: "response"))
    }

    private init(_ f: JSONFields) throws(VerificationError) {
        environment = try f.optionalString("environment")
        bundleId = try f.optionalString("bundleId")
        appAppleId = try f.optionalInt64("appAppleId")
        hasMore = try f.optionalBool("hasMore")
        revision = try f.optionalString("revision")
        items = []
        if let signed = try f.optionalArray("signedTransactions") {
            kind = .transactionHistory
            for (index, entry) in signed.enumerated() {
                guard let jws = entry.string else {
                    throw VerificationError(.invalidPayload, "response.signedTransactions[\(index)] must be a string")
                }
                items.append(Item(signedTransactionInfo: jws))
            }
        } else if let groups = try f.optionalArray("data") {
            kind = .subscriptionStatuses
            for (groupIndex, groupValue) in groups.enumerated() {
                guard groupValue.isObject else {
                    throw VerificationError(.invalidPayload, "response.data[\(groupIndex)] must be an object")
                }
                let group = JSONFields(groupValue, context: "response.data[\(groupIndex)]")
                let groupId = try group.optionalString("subscriptionGroupIdentifier")
                for (index, value) in (try group.optionalArray("lastTransactions") ?? []).enumerated() {
                    guard value.isObject else {
                        throw VerificationError(.invalidPayload, "\(group.context).lastTransactions[\(index)] must be an object")
                    }
                    let last = JSONFields(value, context: "\(group.context).lastTransactions[\(index)]")
                    items.append(
                        Item(
                            signedTransactionInfo: try last.string("signedTransactionInfo"),
                            signedRenewalInfo: try last.optionalString("signedRenewalInfo"),
                            status: try last.optionalInt("status"),
                            originalTransactionId: try last.optionalString("originalTransactionId"),
                            subscriptionGroupIdentifier: groupId))
                }
            }
        } else {
            throw VerificationError(.invalidPayload, "response has neither signedTransactions nor data")
        }
    }
}

/// One verified reconciliation item.
public struct ReconciledItem: Sendable, Equatable {
    public var transaction: TransactionPayload
    public var renewalInfo: RenewalInfoPayload?
    /// Subscription status from the (unsigned) envelope: 1 active, 2 expired, 3 billing retry, 4 grace period, 5 revoked.
    public var status: Int?
    public var subscriptionGroupIdentifier: String?

    /// Memberwise initializer.
    public init(
        transaction: TransactionPayload, renewalInfo: RenewalInfoPayload? = nil, status: Int? = nil,
        subscriptionGroupIdentifier: String? = nil
    ) {
        self.transaction = transaction
        self.renewalInfo = renewalInfo
        self.status = status
        self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
    }
}

extension SignedDataVerifier {
    /// Verifies every signed item independently (full JWS verification, identity checks included).
    /// An item also fails with `.invalidPayload` when the envelope's or the renewal info's
    /// originalTransactionId disagrees with the signed transaction's.
    public func verifyReconciliation(_ response: ReconciliationResponse, now: Int64) -> [Result<ReconciledItem, VerificationError>] {
        response.items.map { item in
            Result { () throws(VerificationError) in
                let transaction = try self.transaction(item.signedTransactionInfo, now: now)
                if let claimed = item.originalTransactionId, claimed != transaction.originalTransactionId {
                    throw VerificationError(
                        .invalidPayload,
                        "envelope originalTransactionId \(claimed) does not match the signed transaction's \(transaction.originalTransactionId)")
                }
                var renewal: RenewalInfoPayload?
                if let signed = item.signedRenewalInfo { renewal = try self.renewalInfo(signed, of: transaction, now: now) }
                return ReconciledItem(
                    transaction: transaction, renewalInfo: renewal, status: item.status,
                    subscriptionGroupIdentifier: item.subscriptionGroupIdentifier)
            }
        }
    }
}
