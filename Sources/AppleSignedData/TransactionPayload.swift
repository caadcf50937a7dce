public import StrictJSON

/// The facts of one App Store transaction (JWSTransaction), after verification or from trusted decoded JSON.
/// Dates are whole milliseconds since the epoch: a fraction is refused, except in an Xcode or
/// LocalTesting payload, whose StoreKit-testing times are floored (`docs/verification.md`).
public struct TransactionPayload: Sendable, Equatable {
    public var originalTransactionId: String
    public var transactionId: String
    public var productId: String
    public var bundleId: String
    public var purchaseDate: Int64
    public var originalPurchaseDate: Int64?
    public var expiresDate: Int64?
    /// "PURCHASED", "FAMILY_SHARED", or whatever raw value Apple sent.
    public var inAppOwnershipType: String
    public var environment: AppleEnvironment
    public var signedDate: Int64
    public var revocationDate: Int64?
    public var revocationReason: Int?
    /// e.g. "Auto-Renewable Subscription", "Consumable" (raw).
    public var type: String?
    public var quantity: Int?
    public var webOrderLineItemId: String?
    public var subscriptionGroupIdentifier: String?
    public var appAccountToken: String?
    public var transactionReason: String?
    public var offerType: Int?
    public var isUpgraded: Bool?
    public var storefront: String?
    public var price: Int64?
    public var currency: String?

    /// True when the purchase reached this user through Family Sharing.
    public var isFamilyShared: Bool { inAppOwnershipType == "FAMILY_SHARED" }

    /// Memberwise initializer (optional facts default to nil).
    public init(
        originalTransactionId: String, transactionId: String, productId: String, bundleId: String,
        purchaseDate: Int64, originalPurchaseDate: Int64? = nil, expiresDate: Int64? = nil,
        inAppOwnershipType: String = "PURCHASED", environment: AppleEnvironment, signedDate: Int64,
        revocationDate: Int64? = nil, revocationReason: Int? = nil, type: String? = nil, quantity: Int? = nil,
        webOrderLineItemId: String? = nil, subscriptionGroupIdentifier: String? = nil, appAccountToken: String? = nil,
        transactionReason: String? = nil, offerType: Int? = nil, isUpgraded: Bool? = nil, storefront: String? = nil,
        price: Int64? = nil, currency: String? = nil
    ) {
        self.originalTransactionId = originalTransactionId
        self.transactionId = transactionId
        self.productId = productId
        self.bundleId = bundleId
        self.purchaseDate = purchaseDate
        self.originalPurchaseDate = originalPurchaseDate
        self.expiresDate = expiresDate
        self.inAppOwnershipType = inAppOwnershipType
        self.environment = environment
        self.signedDate = signedDate
        self.revocationDate = revocationDate
        self.revocationReason = revocationReason
        self.type = type
        self.quantity = quantity
        self.webOrderLineItemId = webOrderLineItemId
        self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
        self.appAccountToken = appAccountToken
        self.transactionReason = transactionReason
        self.offerType = offerType
        self.isUpgraded = isUpgraded
        self.storefront = storefront
        self.price = price
        self.currency = currency
    }

    /// Decodes a JWSTransaction payload object. Missing required fields or wrong types throw
    /// `.invalidPayload` naming the field ("transaction is missing originalTransactionId").
    /// Also used for unsigned `--trust-decoded` input, so nothing here implies verification.
    public init(json: JSONMembers) throws(VerificationError) {
        try self.init(JSONFields(json, context: "transaction"))
    }

    /// Decodes a JWSTransaction payload from JSON bytes (see ``init(json:)``).
    public init(jsonData: some Collection<UInt8>) throws(VerificationError) {
        try self.init(JSONFields(parsing: jsonData, context: "transaction"))
    }

    /// Decodes a JWSTransaction payload object read in place (see ``init(json:)``).
    public init(view: JSONView) throws(VerificationError) {
        try self.init(JSONFields(view, context: "transaction"))
    }

    init(_ fields: JSONFields) throws(VerificationError) {
        // The environment decides how times are read; an error in it is reported in field order below.
        let f = fields.readingTimes(of: try? fields.optionalEnvironment("environment"))
        self.init(
            originalTransactionId: try f.identifier("originalTransactionId", .originalTransactionId),
            transactionId: try f.identifier("transactionId", .transactionId),
            productId: try f.identifier("productId", .productId),
            bundleId: try f.string("bundleId"),
            purchaseDate: try f.millis("purchaseDate"),
            originalPurchaseDate: try f.optionalMillis("originalPurchaseDate"),
            expiresDate: try f.optionalMillis("expiresDate"),
            inAppOwnershipType: try f.string("inAppOwnershipType"),
            environment: try f.environment("environment"),
            signedDate: try f.millis("signedDate"),
            revocationDate: try f.optionalMillis("revocationDate"),
            revocationReason: try f.optionalInt("revocationReason"),
            type: try f.optionalString("type"),
            quantity: try f.optionalInt("quantity"),
            webOrderLineItemId: try f.optionalString("webOrderLineItemId"),
            subscriptionGroupIdentifier: try f.optionalString("subscriptionGroupIdentifier"),
            appAccountToken: try f.optionalString("appAccountToken"),
            transactionReason: try f.optionalString("transactionReason"),
            offerType: try f.optionalInt("offerType"),
            isUpgraded: try f.optionalBool("isUpgraded"),
            storefront: try f.optionalString("storefront"),
            price: try f.optionalInt64("price"),
            currency: try f.optionalString("currency"))
    }
}

/// The facts of one subscription's renewal state (JWSRenewalInfo). Dates in ms since the epoch, read
/// as ``TransactionPayload``'s are.
public struct RenewalInfoPayload: Sendable, Equatable {
    public var originalTransactionId: String
    public var autoRenewProductId: String?
    public var productId: String?
    /// 1 = will renew, 0 = turned off.
    public var autoRenewStatus: Int?
    public var environment: AppleEnvironment
    public var signedDate: Int64
    public var renewalDate: Int64?
    public var gracePeriodExpiresDate: Int64?
    public var isInBillingRetryPeriod: Bool?
    public var expirationIntent: Int?
    public var priceIncreaseStatus: Int?
    public var offerType: Int?
    public var offerIdentifier: String?
    public var recentSubscriptionStartDate: Int64?

    /// Memberwise initializer (optional facts default to nil).
    public init(
        originalTransactionId: String, autoRenewProductId: String? = nil, productId: String? = nil,
        autoRenewStatus: Int? = nil, environment: AppleEnvironment, signedDate: Int64, renewalDate: Int64? = nil,
        gracePeriodExpiresDate: Int64? = nil, isInBillingRetryPeriod: Bool? = nil, expirationIntent: Int? = nil,
        priceIncreaseStatus: Int? = nil, offerType: Int? = nil, offerIdentifier: String? = nil,
        recentSubscriptionStartDate: Int64? = nil
    ) {
        self.originalTransactionId = originalTransactionId
        self.autoRenewProductId = autoRenewProductId
        self.productId = productId
        self.autoRenewStatus = autoRenewStatus
        self.environment = environment
        self.signedDate = signedDate
        self.renewalDate = renewalDate
        self.gracePeriodExpiresDate = gracePeriodExpiresDate
        self.isInBillingRetryPeriod = isInBillingRetryPeriod
        self.expirationIntent = expirationIntent
        self.priceIncreaseStatus = priceIncreaseStatus
        self.offerType = offerType
        self.offerIdentifier = offerIdentifier
        self.recentSubscriptionStartDate = recentSubscriptionStartDate
    }

    /// Decodes a JWSRenewalInfo payload object; errors name the field ("renewalInfo is missing originalTransactionId").
    public init(json: JSONMembers) throws(VerificationError) {
        try self.init(JSONFields(json, context: "renewalInfo"))
    }

    /// Decodes a JWSRenewalInfo payload from JSON bytes.
    public init(jsonData: some Collection<UInt8>) throws(VerificationError) {
        try self.init(JSONFields(parsing: jsonData, context: "renewalInfo"))
    }

    init(_ fields: JSONFields) throws(VerificationError) {
        // The environment decides how times are read; an error in it is reported in field order below.
        let f = fields.readingTimes(of: try? fields.optionalEnvironment("environment"))
        self.init(
            originalTransactionId: try f.identifier("originalTransactionId", .originalTransactionId),
            autoRenewProductId: try f.optionalString("autoRenewProductId"),
            productId: try f.optionalString("productId"),
            autoRenewStatus: try f.optionalInt("autoRenewStatus"),
            environment: try f.environment("environment"),
            signedDate: try f.millis("signedDate"),
            renewalDate: try f.optionalMillis("renewalDate"),
            gracePeriodExpiresDate: try f.optionalMillis("gracePeriodExpiresDate"),
            isInBillingRetryPeriod: try f.optionalBool("isInBillingRetryPeriod"),
            expirationIntent: try f.optionalInt("expirationIntent"),
            priceIncreaseStatus: try f.optionalInt("priceIncreaseStatus"),
            offerType: try f.optionalInt("offerType"),
            offerIdentifier: try f.optionalString("offerIdentifier"),
            recentSubscriptionStartDate: try f.optionalMillis("recentSubscriptionStartDate"))
    }
}
