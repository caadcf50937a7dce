/// One page of the App Store Server API's **Get Notification History** (`NotificationHistoryResponse`):
/// up to 20 notifications Apple attempted to send, each as its `signedPayload`, to be verified like any
/// delivered notification. Only the signed payloads are trusted; unknown fields (`sendAttempts`) are ignored.
public struct NotificationHistoryResponse: Sendable, Equatable {
    /// The `signedPayload` of each `notificationHistory` item, in Apple's order.
    public var signedPayloads: [String]
    public var hasMore: Bool
    /// The token for the next page; present whenever `hasMore` is true.
    public var paginationToken: String?

    public init(signedPayloads: [String], hasMore: Bool, paginationToken: String?) {
        self.signedPayloads = signedPayloads
        self.hasMore = hasMore
        self.paginationToken = paginationToken
    }

    /// Parses a response body (strict JSON); any other shape is `.invalidPayload`, naming the field.
    public init(jsonData: some Collection<UInt8>) throws(VerificationError) {
        let f = try JSONFields(parsing: jsonData, context: "response")
        hasMore = try f.optionalBool("hasMore") ?? false
        paginationToken = try f.optionalString("paginationToken")
        signedPayloads = []
        for (index, value) in (try f.optionalArray("notificationHistory") ?? []).enumerated() {
            guard value.isObject else {
                throw VerificationError(.invalidPayload, "response.notificationHistory[\(index)] must be an object")
            }
            signedPayloads.append(try JSONFields(value, context: "response.notificationHistory[\(index)]").string("signedPayload"))
        }
        if hasMore && (paginationToken ?? "").isEmpty {
            throw VerificationError(.invalidPayload, "response.hasMore is true but response.paginationToken is missing")
        }
    }
}

/// The error body the App Store Server API sends with a failure status: `{"errorCode": 4040010,
/// "errorMessage": "..."}`.
public struct APIErrorResponse: Sendable, Equatable {
    public var errorCode: Int64?
    public var errorMessage: String?

    /// Parses a body; nil unless it is a JSON object with at least one of the two fields, well typed.
    public init?(jsonData: some Collection<UInt8>) {
        guard let fields = try? JSONFields(parsing: jsonData, context: "error") else { return nil }
        do {
            errorCode = try fields.optionalInt64("errorCode")
            errorMessage = try fields.optionalString("errorMessage")
        } catch {
            return nil
        }
        if errorCode == nil && errorMessage == nil { return nil }
    }

    /// Apple's error codes documented as "you can try again": account, app and original transaction id
    /// not found yet (4040002, 4040004, 4040006) and the retryable internal error (5000001).
    public static let retryableCodes: Set<Int64> = [4_040_002, 4_040_004, 4_040_006, 5_000_001]
}
