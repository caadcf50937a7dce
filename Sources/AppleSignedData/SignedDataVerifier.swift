import Foundation
import LedgerCrypto
public import StrictJSON

/// What a signed payload is, which decides its identity checks and validation date.
public enum SignedDataKind: String, Sendable, CaseIterable {
    case transaction, renewalInfo, notification, appTransaction, unknown

    /// Guesses the kind from the payload's fields (for ``SignedDataVerifier/inspect(_:now:)``).
    static func guess(_ payload: JSONView) -> SignedDataKind {
        if payload["notificationType"] != nil { return .notification }
        if payload["receiptType"] != nil || payload["appTransactionId"] != nil && payload["transactionId"] == nil {
            return .appTransaction
        }
        if payload["transactionId"] != nil || payload["inAppOwnershipType"] != nil || payload["purchaseDate"] != nil {
            return .transaction
        }
        if payload["autoRenewStatus"] != nil || payload["autoRenewProductId"] != nil || payload["renewalDate"] != nil {
            return .renewalInfo
        }
        return .unknown
    }
}

/// A verified (or, under an Xcode/LocalTesting configuration, merely decoded) JWS.
public struct InspectedJWS: Sendable, Equatable {
    /// The kind asked for, or guessed from the payload's fields by ``SignedDataVerifier/inspect(_:now:)``.
    public var kind: SignedDataKind
    /// The header's members.
    public var header: JSONMembers
    /// The payload's members.
    public var payload: JSONMembers
    /// Subject of the verified leaf certificate (OpenSSL one-line form); nil when signatures were not checked.
    public var leafSubject: String?
    /// False only under an Xcode/LocalTesting configuration, where nothing is verified.
    public var signatureVerified: Bool
    /// Unix seconds at which the chain was validated; nil when it was not.
    public var validatedAt: Int64?
}

/// Offline verifier of App Store signed data (JWS with ES256 and an `x5c` chain), as Apple's
/// App Store Server Libraries verify it with online checks off. See `docs/verification.md`.
///
/// Never reads the clock: `now` (ms since the epoch) is used only when the payload has no `signedDate`
/// (AppTransaction: `receiptCreationDate`), or always when `validateAtSignedDate` is false.
public struct SignedDataVerifier: Sendable {
    public let configuration: VerifierConfiguration
    /// The configured roots in one OpenSSL store, built once.
    let validator: ChainValidator
    /// Headers verified and chains validated before (shared by copies of this verifier).
    let chains: ChainCache

    /// Leaf (App Store receipt signing) and intermediate (Apple WWDR) extension OIDs.
    static let leafOID = "1.2.840.113635.100.6.11.1"
    static let intermediateOID = "1.2.840.113635.100.6.2.1"

    /// Checks the configuration: at least one decodable root, appAppleId for Production,
    /// and `allowLocalTesting` for Xcode/LocalTesting. Failures are `.invalidConfiguration`.
    /// `cachedChains`: how many distinct verified JWS headers (each with its validated `x5c` chain) to
    /// remember, so that a JWS with a known header costs one ECDSA verification (docs/verification.md).
    public init(configuration: VerifierConfiguration, cachedChains: Int = 64) throws(VerificationError) {
        guard !configuration.rootCertificates.isEmpty else {
            throw VerificationError(.invalidConfiguration, "at least one root certificate is required")
        }
        var roots: [X509Certificate] = []
        for (index, der) in configuration.rootCertificates.enumerated() {
            guard let root = X509Certificate(der: der) else {
                throw VerificationError(.invalidConfiguration, "rootCertificates[\(index)] is not a DER X.509 certificate")
            }
            roots.append(root)
        }
        let validator = try ChainValidator(roots: roots)
        if configuration.environment == .production && configuration.appAppleId == nil {
            throw VerificationError(.invalidConfiguration, "a Production verifier requires appAppleId")
        }
        if configuration.environment.isLocal && !configuration.allowLocalTesting {
            throw VerificationError(
                .invalidConfiguration,
                "environment \(configuration.environment.rawValue) skips all signature checks; set allowLocalTesting to use it")
        }
        self.configuration = configuration
        self.validator = validator
        chains = ChainCache(capacity: cachedChains)
    }

    /// Verifies a JWSTransaction: format, chain, signature, then bundleId and environment; decodes it.
    public func verifyTransaction(_ jws: String, now: Int64) -> Result<TransactionPayload, VerificationError> {
        Result { () throws(VerificationError) in try transaction(jws, now: now) }
    }

    /// Verifies a JWSRenewalInfo: format, chain, signature, then environment; decodes it.
    public func verifyRenewalInfo(_ jws: String, now: Int64) -> Result<RenewalInfoPayload, VerificationError> {
        Result { () throws(VerificationError) in try renewalInfo(jws, of: nil, now: now) }
    }

    /// Verifies a notification `signedPayload` (bundleId, appAppleId when Production, environment), then
    /// verifies and decodes `data.signedTransactionInfo` and `data.signedRenewalInfo` the same way.
    public func verifyNotification(_ signedPayload: String, now: Int64) -> Result<NotificationPayload, VerificationError> {
        Result { () throws(VerificationError) in
            let verified = try verifyJWS(signedPayload, kind: .notification, now: now)
            let fields = JSONFields(verified.payload, context: "notification")
            let data = try fields.optionalObject("data")
            var transaction: TransactionPayload?
            var renewal: RenewalInfoPayload?
            if let signed = try data?.optionalString("signedTransactionInfo") {
                transaction = try nested("data.signedTransactionInfo") { () throws(VerificationError) in try self.transaction(signed, now: now) }
            }
            if let signed = try data?.optionalString("signedRenewalInfo") {
                renewal = try nested("data.signedRenewalInfo") { () throws(VerificationError) in
                    try self.renewalInfo(signed, of: transaction, now: now)
                }
            }
            return try NotificationPayload(fields, transaction: transaction, renewalInfo: renewal)
        }
    }

    /// Full verification with the identity checks of `kind` (none for `.unknown`), without decoding into a
    /// typed payload. This is the verdict Apple's libraries give; the typed methods add required-field checks.
    public func verify(_ jws: String, as kind: SignedDataKind, now: Int64) -> Result<InspectedJWS, VerificationError> {
        Result { () throws(VerificationError) in try verifyJWS(jws, kind: kind, now: now).inspected() }
    }

    /// Verified header and payload JSON without identity or payload-type checks (for `ledger inspect-jws`).
    /// The kind is guessed from the payload's fields and decides the validation date field.
    public func inspect(_ jws: String, now: Int64) -> Result<InspectedJWS, VerificationError> {
        Result { () throws(VerificationError) in try verifyJWS(jws, kind: nil, now: now).inspected() }
    }

    // MARK: - Pipeline

    func transaction(_ jws: String, now: Int64) throws(VerificationError) -> TransactionPayload {
        let verified = try verifyJWS(jws, kind: .transaction, now: now)
        return try TransactionPayload(JSONFields(verified.payload, context: "transaction"))
    }

    /// Verifies and decodes renewal info sent beside `transaction` (when there is one): both must be of
    /// the same lineage.
    func renewalInfo(_ jws: String, of transaction: TransactionPayload?, now: Int64) throws(VerificationError) -> RenewalInfoPayload {
        let verified = try verifyJWS(jws, kind: .renewalInfo, now: now)
        let renewal = try RenewalInfoPayload(JSONFields(verified.payload, context: "renewalInfo"))
        if let transaction, renewal.originalTransactionId != transaction.originalTransactionId {
            throw VerificationError(
                .invalidPayload,
                "renewal info originalTransactionId \(renewal.originalTransactionId) does not match the transaction's \(transaction.originalTransactionId)"
            )
        }
        return renewal
    }

    private func nested<T>(_ field: String, _ body: () throws(VerificationError) -> T) throws(VerificationError) -> T {
        do {
            return try body()
        } catch {
            throw VerificationError(error.code, "\(field): \(error.message)")
        }
    }

    struct Verified {
        var kind: SignedDataKind
        var header: JSONMembers
        /// The payload object, read in place.
        var payload: JSONView
        var leafSubject: String?
        var validatedAt: Int64?

        func inspected() -> InspectedJWS {
            InspectedJWS(
                kind: kind, header: header, payload: payload.value.members ?? [:], leafSubject: leafSubject, signatureVerified: leafSubject != nil,
                validatedAt: validatedAt)
        }
    }

    /// Steps 1–6 of `docs/verification.md`. `kind == nil` guesses the kind and skips identity checks.
    func verifyJWS(_ jws: String, kind requestedKind: SignedDataKind?, now: Int64) throws(VerificationError) -> Verified {
        var text = jws
        return try text.withUTF8 { bytes in
            Result { () throws(VerificationError) in try verifyJWS(utf8: bytes, kind: requestedKind, now: now) }
        }.get()
    }

    /// ``verifyJWS(_:kind:now:)`` on the JWS's UTF-8 bytes, read in place.
    func verifyJWS(utf8 jws: UnsafeBufferPointer<UInt8>, kind requestedKind: SignedDataKind?, now: Int64) throws(VerificationError)
        -> Verified
    {
        // 1. Shape.
        guard let segments = CompactJWS(jws) else {
            let count = CompactJWS.segmentCount(jws)
            throw VerificationError(.invalidJWSFormat, "JWS has \(count) segment\(count == 1 ? "" : "s"); exactly 3 are required")
        }
        let headerSegment = UnsafeBufferPointer(rebasing: jws[segments.header])
        // A header whose exact bytes verified before passed step 2 and had its chain validated (ChainCache).
        let known = configuration.environment.isLocal ? nil : chains.entry(for: headerSegment)
        let header: JSONMembers
        if let known { header = known.header } else { header = try Self.jsonSegment(headerSegment, name: "header").value.members ?? [:] }
        let payload = try Self.jsonSegment(UnsafeBufferPointer(rebasing: jws[segments.payload]), name: "payload")
        guard let signature = Base64URL.decode(utf8: UnsafeBufferPointer(rebasing: jws[segments.signature])) else {
            throw VerificationError(.invalidJWSFormat, "JWS signature is not canonical base64url")
        }
        let kind = requestedKind ?? SignedDataKind.guess(payload)
        var verified = Verified(kind: kind, header: header, payload: payload)

        // 3. Xcode / LocalTesting configurations (allowed only with allowLocalTesting): decode + identity only.
        if !configuration.environment.isLocal {
            // 2. Header (alg, crit, x5c), then the x5c certificates.
            let certificates: (leaf: X509Certificate, intermediate: X509Certificate)
            if let known {
                certificates = (known.chain.leaf, known.chain.intermediate)
            } else {
                certificates = try Self.x5cCertificates(header)
            }

            // 4. Chain at the effective time, then the Apple OIDs.
            let time = try effectiveTime(payload, kind: kind, now: now)
            let chain: ValidatedChain
            if let cached = known?.chain, cached.isValid(at: time) {
                chain = cached
            } else {
                chain = try validateChain(leaf: certificates.leaf, intermediate: certificates.intermediate, time: time)
                chains.insert(ChainCache.Entry(header: header, chain: chain), for: headerSegment)
            }

            // 5. ES256 signature with the leaf key, over the ASCII bytes `header.payload`.
            let signingInput = UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: jws[segments.signingInput]))
            try Self.verifySignature(signature, input: signingInput, key: chain.leafKey)
            verified.leafSubject = chain.leafSubject
            verified.validatedAt = time
        }

        // 6. Identity.
        if requestedKind != nil { try checkIdentity(payload, kind: kind) }
        return verified
    }

    /// Step 2: the header's `alg` is ES256, it lists no critical extensions, and its `x5c` holds three
    /// canonical base64 DER certificates; returns the leaf and the intermediate. `x5c[2]` is parsed
    /// but never used: only configured roots are trusted.
    static func x5cCertificates(_ header: JSONMembers) throws(VerificationError) -> (X509Certificate, X509Certificate) {
        guard let alg = header["alg"] else {
            throw VerificationError(.invalidJWSFormat, "JWS header has no alg; ES256 is required")
        }
        guard let algName = alg.string, JSONBytes.equal(algName, "ES256") else {
            throw VerificationError(.invalidJWSFormat, "JWS alg is \(Self.describe(alg)); only ES256 is accepted")
        }
        // RFC 7515 §4.1.11: critical extensions this verifier does not implement must be refused.
        if header["crit"] != nil {
            throw VerificationError(.invalidJWSFormat, "JWS header lists critical extensions (crit); none are supported")
        }
        guard let x5cValue = header["x5c"] else {
            throw VerificationError(.invalidJWSFormat, "JWS header has no x5c certificate chain")
        }
        guard case .array(let x5c) = x5cValue else {
            throw VerificationError(.invalidJWSFormat, "JWS header x5c is not an array")
        }
        guard x5c.count == 3 else {
            throw VerificationError(
                .invalidJWSFormat, "x5c holds \(x5c.count) certificate\(x5c.count == 1 ? "" : "s"); exactly 3 are required")
        }
        var ders: [[UInt8]] = []
        for (index, entry) in x5c.enumerated() {
            guard case .string(let text) = entry else {
                throw VerificationError(.invalidCertificate, "x5c[\(index)] is not a string")
            }
            guard let der = Base64.decode(text) else {
                throw VerificationError(.invalidCertificate, "x5c[\(index)] is not valid base64 (canonical, padded: RFC 4648 §4)")
            }
            ders.append(der)
        }
        var certificates: [X509Certificate] = []
        for (index, der) in ders.enumerated() {
            guard let certificate = X509Certificate(der: der) else {
                throw VerificationError(.invalidCertificate, "x5c[\(index)] is not a DER X.509 certificate")
            }
            certificates.append(certificate)
        }
        return (certificates[0], certificates[1])
    }

    /// A segment's JSON object, read in place.
    static func jsonSegment(_ segment: UnsafeBufferPointer<UInt8>, name: String) throws(VerificationError) -> JSONView {
        guard let bytes = Base64URL.decode(utf8: segment) else {
            throw VerificationError(.invalidJWSFormat, "JWS \(name) is not canonical base64url")
        }
        let root: JSONView
        do {
            root = try JSONReader().document(bytes).root
        } catch {
            throw VerificationError(.invalidJWSFormat, "JWS \(name) is not a JSON object: \(error.message)")
        }
        guard root.isObject else {
            throw VerificationError(.invalidJWSFormat, "JWS \(name) is not a JSON object: the JSON value is \(root.kind), not an object")
        }
        return root
    }

    static func describe(_ value: JSONValue) -> String {
        if let string = value.string { return "\"\(string)\"" }
        return "not a string"
    }

    /// Unix seconds at which to validate the chain.
    func effectiveTime(_ payload: JSONView, kind: SignedDataKind, now: Int64) throws(VerificationError) -> Int64 {
        var millis: Int64?
        if configuration.validateAtSignedDate {
            let fields = JSONFields(payload, context: "payload")
            switch kind {
            case .appTransaction: millis = try fields.optionalMillis("receiptCreationDate")
            case .unknown:
                millis = try fields.optionalMillis("signedDate")
                if millis == nil { millis = try fields.optionalMillis("receiptCreationDate") }
            default: millis = try fields.optionalMillis("signedDate")
            }
        }
        let ms = millis ?? now
        return ms / 1000 - (ms % 1000 < 0 ? 1 : 0)  // floor, without overflow at Int64.min
    }

    func validateChain(leaf: X509Certificate, intermediate: X509Certificate, time: Int64) throws(VerificationError) -> ValidatedChain {
        let path = try validator.validate(leaf: leaf, intermediate: intermediate, time: time)
        guard path.count == 3 else {
            throw VerificationError(
                .invalidChain, "validated chain has \(path.count) certificates; exactly 3 (leaf, intermediate, root) are required")
        }
        guard try leaf.hasExtension(oid: Self.leafOID) else {
            throw VerificationError(.invalidChain, "leaf certificate lacks the App Store receipt-signing extension OID \(Self.leafOID)")
        }
        guard try intermediate.hasExtension(oid: Self.intermediateOID) else {
            throw VerificationError(.invalidChain, "intermediate certificate lacks the Apple WWDR extension OID \(Self.intermediateOID)")
        }
        return try ValidatedChain(leaf: leaf, intermediate: intermediate, path: path)
    }

    /// `key`: the leaf's key, or why it cannot verify an ES256 signature (``ValidatedChain/leafKey``).
    static func verifySignature(_ signature: [UInt8], input: UnsafeRawBufferPointer, key: Result<PublicKey, VerificationError>)
        throws(VerificationError)
    {
        guard signature.count == 64 else {
            throw VerificationError(.verificationFailed, "ES256 signature is \(signature.count) bytes; 64 (R‖S) are required")
        }
        guard try key.get().verifyES256(signature: signature, message: input) else {
            throw VerificationError(.verificationFailed, "ES256 signature does not verify with the leaf certificate's key")
        }
    }

    func checkIdentity(_ payload: JSONView, kind: SignedDataKind) throws(VerificationError) {
        let fields = JSONFields(payload, context: kind.rawValue)
        switch kind {
        case .transaction:
            try checkBundle(try fields.optionalString("bundleId"), kind)
            try checkEnvironment(try fields.optionalString("environment"), kind)
        case .renewalInfo:
            try checkEnvironment(try fields.optionalString("environment"), kind)
        case .notification, .appTransaction:
            let identity =
                kind == .notification
                ? try NotificationIdentity(fields) : try NotificationIdentity(fields, environmentKey: "receiptType")
            try checkBundle(identity.bundleId, kind)
            if configuration.environment == .production && identity.appAppleId != configuration.appAppleId {
                let found = identity.appAppleId.map { String($0) } ?? "none"
                let expected = configuration.appAppleId.map { String($0) } ?? "none"
                throw VerificationError(.invalidAppIdentifier, "\(kind.rawValue) appAppleId \(found) does not match the configured \(expected)")
            }
            try checkEnvironment(identity.environment, kind)
        case .unknown:
            break
        }
    }

    private func checkBundle(_ bundleId: String?, _ kind: SignedDataKind) throws(VerificationError) {
        guard let bundleId else {
            throw VerificationError(.invalidAppIdentifier, "\(kind.rawValue) has no bundleId; expected \"\(configuration.bundleId)\"")
        }
        guard JSONBytes.equal(bundleId, configuration.bundleId) else {
            throw VerificationError(
                .invalidAppIdentifier, "\(kind.rawValue) bundleId \"\(bundleId)\" does not match the configured \"\(configuration.bundleId)\"")
        }
    }

    private func checkEnvironment(_ environment: String?, _ kind: SignedDataKind) throws(VerificationError) {
        let expected = configuration.environment.rawValue
        guard let environment else {
            throw VerificationError(.invalidEnvironment, "\(kind.rawValue) has no environment; expected \(expected)")
        }
        guard JSONBytes.equal(environment, expected) else {
            throw VerificationError(.invalidEnvironment, "\(kind.rawValue) environment \"\(environment)\" does not match the configured \(expected)")
        }
    }
}
