public import StrictJSON

/// The JSON of Apple's legacy `verifyReceipt` response:
/// `{"status":0, "environment":"Sandbox"|"Production", "receipt":{"bundle_id":...}, "latest_receipt_info":[{...}]}`.
/// The `*_ms` fields are decimal strings. The receipt's PKCS#7 signature is **not** verified here
/// (the response comes from Apple over TLS; see `docs/verification.md`).
public struct LegacyReceiptResponse: Sendable, Equatable {
    /// One `latest_receipt_info` (or `receipt.in_app`) entry.
    public struct Entry: Sendable, Equatable {
        public var originalTransactionId: String
        public var transactionId: String
        public var productId: String
        public var purchaseDateMs: Int64
        public var originalPurchaseDateMs: Int64?
        public var expiresDateMs: Int64?
        public var inAppOwnershipType: String?
        public var cancellationDateMs: Int64?
        public var cancellationReason: Int?
        public var webOrderLineItemId: String?
        public var quantity: Int?
        /// `is_upgraded` ("true"): the entry's subscription was upgraded to another of the group; its
        /// `cancellation_date` is the time of the upgrade, not a refund.
        public var isUpgraded: Bool = false
    }

    public var status: Int
    public var environment: String?
    public var bundleId: String?
    /// `receipt.receipt_creation_date_ms`, if present.
    public var receiptCreationDateMs: Int64?
    /// `latest_receipt_info`, or `receipt.in_app` when the former is absent.
    public var entries: [Entry]

    /// Parses the response; wrong shapes are `.invalidPayload` naming the field.
    public init(jsonData: some Collection<UInt8>) throws(VerificationError) {
        try self.init(JSONFields(parsing: jsonData, context: "verifyReceipt"))
    }

    /// Parses the response from a JSON object.
    public init(json: JSONMembers) throws(VerificationError) {
        try self.init(JSONFields(json, context: "verifyReceipt"))
    }

    /// Parses the response from a JSON object read in place.
    public init(view: JSONView) throws(VerificationError) {
        try self.init(JSONFields(view, context: "verifyReceipt"))
    }

    private init(_ f: JSONFields) throws(VerificationError) {
        guard let status = try f.optionalInt("status") else {
            throw VerificationError(.invalidPayload, "verifyReceipt is missing status")
        }
        self.status = status
        environment = try f.optionalString("environment")
        let receipt = try f.optionalObject("receipt")
        bundleId = try receipt?.optionalString("bundle_id")
        receiptCreationDateMs = try receipt.map { r throws(VerificationError) in try Self.optionalMs(r, "receipt_creation_date_ms") } ?? nil
        var raw: [JSONView] = []
        var context = "verifyReceipt.latest_receipt_info"
        if let latest = try f.optionalArray("latest_receipt_info") {
            raw = latest
        } else if let inApp = try receipt?.optionalArray("in_app") {
            raw = inApp
            context = "verifyReceipt.receipt.in_app"
        }
        entries = []
        for (index, value) in raw.enumerated() {
            guard value.isObject else {
                throw VerificationError(.invalidPayload, "\(context)[\(index)] must be an object")
            }
            let e = JSONFields(value, context: "\(context)[\(index)]")
            guard let purchase = try Self.optionalMs(e, "purchase_date_ms") else {
                throw VerificationError(.invalidPayload, "\(e.context) is missing purchase_date_ms")
            }
            entries.append(
                Entry(
                    originalTransactionId: try e.identifier("original_transaction_id", .originalTransactionId),
                    transactionId: try e.identifier("transaction_id", .transactionId),
                    productId: try e.identifier("product_id", .productId),
                    purchaseDateMs: purchase,
                    originalPurchaseDateMs: try Self.optionalMs(e, "original_purchase_date_ms"),
                    expiresDateMs: try Self.optionalMs(e, "expires_date_ms"),
                    inAppOwnershipType: try e.optionalString("in_app_ownership_type"),
                    cancellationDateMs: try Self.optionalMs(e, "cancellation_date_ms"),
                    cancellationReason: try Self.optionalCount(e, "cancellation_reason"),
                    webOrderLineItemId: try e.optionalString("web_order_line_item_id"),
                    quantity: try Self.optionalCount(e, "quantity"), isUpgraded: try Self.optionalFlag(e, "is_upgraded")))
        }
    }

    /// Whole milliseconds as a string of decimal digits (Apple's form) or a plain JSON integer.
    static func optionalMs(_ f: JSONFields, _ key: String) throws(VerificationError) -> Int64? {
        guard let value = try optionalDecimal(f, key) else { return nil }
        if let millis = value { return millis }
        switch f.value(key)?.value {
        case .number(let number) where JSONValue.isBeyondInt64(number):
            throw VerificationError(.invalidPayload, JSONValue.outsideSupportedRange("\(f.context).\(key)"))
        case .string(let digits) where !digits.isEmpty && digits.utf8.allSatisfy({ (48...57).contains($0) }):
            // Decimal digits that do not fit in 64 bits.
            throw VerificationError(.invalidPayload, JSONValue.outsideSupportedRange("\(f.context).\(key)"))
        default:
            throw VerificationError(.invalidPayload, JSONValue.millisecondsRequired("\(f.context).\(key)"))
        }
    }

    /// A flag as Apple's string ("true" or "false") or a JSON boolean; absent is false.
    static func optionalFlag(_ f: JSONFields, _ key: String) throws(VerificationError) -> Bool {
        switch f.value(key)?.value {
        case nil: return false
        case .bool(let flag): return flag
        case .string("true"): return true
        case .string("false"): return false
        default: throw f.wrongType(key, "\"true\", \"false\" or a boolean")
        }
    }

    /// A count or code as a string of decimal digits or a plain JSON integer.
    static func optionalCount(_ f: JSONFields, _ key: String) throws(VerificationError) -> Int? {
        guard let value = try optionalDecimal(f, key) else { return nil }
        guard let count = value.flatMap({ Int(exactly: $0) }) else { throw f.wrongType(key, "a string of decimal digits") }
        return count
    }

    /// nil when absent; `.some(nil)` when present but not a decimal string or a plain integer.
    private static func optionalDecimal(_ f: JSONFields, _ key: String) throws(VerificationError) -> Int64?? {
        switch f.value(key)?.value {
        case nil: return .none
        case .integer(let value): return .some(value)
        case .string(let text):
            guard !text.isEmpty, text.utf8.allSatisfy({ (48...57).contains($0) }) else { return .some(nil) }
            return .some(Int64(text))
        default: return .some(nil)
        }
    }
}

extension SignedDataVerifier {
    /// Checks a parsed `verifyReceipt` response (status 0, bundle, environment) and converts each entry into a
    /// ``TransactionPayload``: bundleId from `receipt.bundle_id`, environment from the top level,
    /// `in_app_ownership_type` defaulting to PURCHASED, cancellation as revocation, and `signedDate` set to the
    /// receipt creation date (or the entry's purchase date when absent). FAMILY_SHARED is kept, not rejected.
    public func verifyLegacyReceipt(_ response: LegacyReceiptResponse) -> Result<[TransactionPayload], VerificationError> {
        Result { () throws(VerificationError) in
            guard response.status == 0 else {
                throw VerificationError(.invalidPayload, "verifyReceipt status is \(response.status); only 0 (valid) is accepted")
            }
            guard let bundleId = response.bundleId else {
                throw VerificationError(.invalidAppIdentifier, "verifyReceipt receipt has no bundle_id; expected \"\(configuration.bundleId)\"")
            }
            guard JSONBytes.equal(bundleId, configuration.bundleId) else {
                throw VerificationError(
                    .invalidAppIdentifier, "verifyReceipt bundle_id \"\(bundleId)\" does not match the configured \"\(configuration.bundleId)\"")
            }
            guard let rawEnvironment = response.environment, let environment = AppleEnvironment(exactly: rawEnvironment) else {
                throw VerificationError(
                    .invalidEnvironment,
                    "verifyReceipt environment \(response.environment.map { "\"\($0)\"" } ?? "is missing"); expected \(configuration.environment.rawValue)"
                )
            }
            guard environment == configuration.environment else {
                throw VerificationError(
                    .invalidEnvironment,
                    "verifyReceipt environment \"\(rawEnvironment)\" does not match the configured \(configuration.environment.rawValue)")
            }
            return response.entries.map { entry in
                TransactionPayload(
                    originalTransactionId: entry.originalTransactionId, transactionId: entry.transactionId,
                    productId: entry.productId, bundleId: bundleId, purchaseDate: entry.purchaseDateMs,
                    originalPurchaseDate: entry.originalPurchaseDateMs, expiresDate: entry.expiresDateMs,
                    inAppOwnershipType: entry.inAppOwnershipType ?? "PURCHASED", environment: environment,
                    signedDate: response.receiptCreationDateMs ?? entry.purchaseDateMs,
                    revocationDate: entry.cancellationDateMs, revocationReason: entry.cancellationReason,
                    quantity: entry.quantity, webOrderLineItemId: entry.webOrderLineItemId, isUpgraded: entry.isUpgraded ? true : nil)
            }
        }
    }
}
