public import StrictJSON

/// An App Store Server Notification V2 (`signedPayload`), with its nested transaction and renewal info.
public struct NotificationPayload: Sendable, Equatable {
    public var notificationType: String
    public var subtype: String?
    public var notificationUUID: String
    public var signedDate: Int64
    /// From the first present of `data`, `summary`, `externalPurchaseToken`, `appData`.
    public var bundleId: String?
    public var appAppleId: Int64?
    public var environment: AppleEnvironment?
    /// `data.status` (1 active, 2 expired, 3 billing retry, 4 grace period, 5 revoked).
    public var status: Int?
    /// Decoded `data.signedTransactionInfo` (verified like any transaction when the notification is signed).
    public var transaction: TransactionPayload?
    /// Decoded `data.signedRenewalInfo` (verified like any renewal info when the notification is signed).
    public var renewalInfo: RenewalInfoPayload?

    /// Memberwise initializer.
    public init(
        notificationType: String, subtype: String? = nil, notificationUUID: String, signedDate: Int64,
        bundleId: String? = nil, appAppleId: Int64? = nil, environment: AppleEnvironment? = nil, status: Int? = nil,
        transaction: TransactionPayload? = nil, renewalInfo: RenewalInfoPayload? = nil
    ) {
        self.notificationType = notificationType
        self.subtype = subtype
        self.notificationUUID = notificationUUID
        self.signedDate = signedDate
        self.bundleId = bundleId
        self.appAppleId = appAppleId
        self.environment = environment
        self.status = status
        self.transaction = transaction
        self.renewalInfo = renewalInfo
    }

    /// Decodes an **unsigned, already decoded** notification (for `--trust-decoded`):
    /// `{notificationType, subtype?, notificationUUID, signedDate, data: {environment, bundleId, appAppleId?,
    /// status?, transaction: {...TransactionPayload fields...}?, renewalInfo: {...}?}}`.
    /// `summary` / `externalPurchaseToken` / `appData` are accepted in place of `data` for the identity fields.
    public init(json: JSONMembers) throws(VerificationError) {
        try self.init(decoded: JSONFields(json, context: "notification"))
    }

    /// Decodes an unsigned notification object read in place (see ``init(json:)``).
    public init(view: JSONView) throws(VerificationError) {
        try self.init(decoded: JSONFields(view, context: "notification"))
    }

    private init(decoded fields: JSONFields) throws(VerificationError) {
        let data = try fields.optionalObject("data")
        var transaction: TransactionPayload?
        var renewalInfo: RenewalInfoPayload?
        if let object = try data?.optionalObject("transaction") {
            transaction = try TransactionPayload(JSONFields(object.object, context: "notification.data.transaction"))
        }
        if let object = try data?.optionalObject("renewalInfo") {
            renewalInfo = try RenewalInfoPayload(JSONFields(object.object, context: "notification.data.renewalInfo"))
        }
        try self.init(fields, transaction: transaction, renewalInfo: renewalInfo)
    }

    /// Decodes an unsigned notification from JSON bytes (see ``init(json:)``).
    public init(jsonData: some Collection<UInt8>) throws(VerificationError) {
        try self.init(decoded: JSONFields(parsing: jsonData, context: "notification"))
    }

    init(_ f: JSONFields, transaction: TransactionPayload?, renewalInfo: RenewalInfoPayload?) throws(VerificationError) {
        let identity = try NotificationIdentity(f)
        var environment: AppleEnvironment?
        if let raw = identity.environment {
            guard let known = AppleEnvironment(exactly: raw) else {
                throw VerificationError(.invalidPayload, "notification environment \"\(raw)\" is not one of Production, Sandbox, Xcode, LocalTesting")
            }
            environment = known
        }
        self.init(
            notificationType: try f.string("notificationType"),
            subtype: try f.optionalString("subtype"),
            notificationUUID: try f.string("notificationUUID"),
            signedDate: try f.readingTimes(of: environment).millis("signedDate"),
            bundleId: identity.bundleId,
            appAppleId: identity.appAppleId,
            environment: environment,
            status: try f.optionalObject("data")?.optionalInt("status"),
            transaction: transaction,
            renewalInfo: renewalInfo)
    }
}

/// bundleId / appAppleId / environment of a notification, taken as Apple's libraries do from the first
/// present of `data`, `summary`, `externalPurchaseToken` (environment from the `externalPurchaseId` prefix), `appData`.
struct NotificationIdentity {
    var bundleId: String?
    var appAppleId: Int64?
    var environment: String?

    init(_ f: JSONFields) throws(VerificationError) {
        var source = try f.optionalObject("data")
        if source == nil { source = try f.optionalObject("summary") }
        if let source {
            try self.init(source, environmentKey: "environment")
        } else if let token = try f.optionalObject("externalPurchaseToken") {
            let id = try token.optionalString("externalPurchaseId") ?? ""
            self.init(
                bundleId: try token.optionalString("bundleId"), appAppleId: try token.optionalInt64("appAppleId"),
                environment: id.hasPrefix("SANDBOX") ? AppleEnvironment.sandbox.rawValue : AppleEnvironment.production.rawValue)
        } else if let source = try f.optionalObject("appData") {
            try self.init(source, environmentKey: "environment")
        } else {
            self.init(bundleId: nil, appAppleId: nil, environment: nil)
        }
    }

    init(bundleId: String?, appAppleId: Int64?, environment: String?) {
        self.bundleId = bundleId
        self.appAppleId = appAppleId
        self.environment = environment
    }

    /// Identity of any object holding bundleId / appAppleId / an environment field (AppTransaction: `receiptType`).
    init(_ source: JSONFields, environmentKey: String) throws(VerificationError) {
        self.init(
            bundleId: try source.optionalString("bundleId"), appAppleId: try source.optionalInt64("appAppleId"),
            environment: try source.optionalString(environmentKey))
    }
}
