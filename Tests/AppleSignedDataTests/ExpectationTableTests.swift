import Foundation
import StrictJSON
import Testing

@testable import AppleSignedData

/// One `jwsCases` entry of Vectors/expectations.json.
struct JWSCase: Sendable, CustomTestStringConvertible {
    var id: String
    var file: String?
    var inline: String?
    var method: String
    var root: String
    var environment: String
    var bundleId: String
    var appAppleId: Int64?
    var effectiveTime: Int64?
    var validateAt: Int64?
    var expect: String
    /// `fields` re-serialized as JSON (kept as Data to stay Sendable).
    var fields: Data?

    var testDescription: String { id }

    static func all() -> [JWSCase] {
        guard let data = try? Vectors.data("expectations.json"),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let cases = object["jwsCases"] as? [[String: Any]]
        else { return [] }
        return cases.compactMap { entry in
            guard let id = entry["id"] as? String, let method = entry["method"] as? String,
                let verifier = entry["verifier"] as? [String: Any], let expect = entry["expect"] as? String
            else { return nil }
            return JWSCase(
                id: id, file: entry["file"] as? String, inline: entry["inline"] as? String, method: method,
                root: verifier["root"] as? String ?? "", environment: verifier["environment"] as? String ?? "",
                bundleId: verifier["bundleId"] as? String ?? "", appAppleId: (verifier["appAppleId"] as? NSNumber)?.int64Value,
                effectiveTime: (entry["effectiveTime"] as? NSNumber)?.int64Value,
                validateAt: (verifier["validateAt"] as? NSNumber)?.int64Value, expect: expect,
                fields: (entry["fields"] as? [String: Any]).flatMap { try? JSONSerialization.data(withJSONObject: $0) })
        }
    }

    /// The error code each upstream verdict maps to (nil: must verify).
    var expectedCode: VerificationError.Code? {
        switch expect {
        case "VALID", "VALID_UNVERIFIED": return nil
        case "INVALID_APP_IDENTIFIER": return .invalidAppIdentifier
        case "INVALID_ENVIRONMENT": return .invalidEnvironment
        case "INVALID_CHAIN": return .invalidChain
        case "REJECT", "REJECT_HEADER", "REJECT_FORMAT": return .invalidJWSFormat
        default: return .invalidPayload  // unknown verdict: makes the test fail loudly
        }
    }

    var kind: SignedDataKind { SignedDataKind(rawValue: method) ?? .unknown }
}

@Suite struct ExpectationTableTests {
    @Test func tableIsLoaded() {
        #expect(JWSCase.all().count == 24)
    }

    @Test(arguments: JWSCase.all())
    func jwsCase(_ testCase: JWSCase) throws {
        let environment = try #require(AppleEnvironment(rawValue: testCase.environment))
        let verifier = try SignedDataVerifier(
            configuration: VerifierConfiguration(
                bundleId: testCase.bundleId, environment: environment, appAppleId: testCase.appAppleId,
                rootCertificates: [try Vectors.der(testCase.root)], allowLocalTesting: environment.isLocal,
                validateAtSignedDate: testCase.validateAt == nil))
        let jws = try testCase.inline ?? Vectors.string(try #require(testCase.file))
        let now = (testCase.validateAt ?? Vectors.effectiveDate) * 1000
        let result = verifier.verify(jws, as: testCase.kind, now: now)

        if let code = testCase.expectedCode {
            #expect(result.failure?.code == code, "\(testCase.id): \(result)")
            return
        }
        let inspected = try result.get()
        #expect(inspected.signatureVerified == (testCase.expect == "VALID"))
        if let time = testCase.effectiveTime {
            #expect(inspected.validatedAt == time)
        }
        let payload = inspected.payload
        if let fieldData = testCase.fields,
            let fields = try JSONSerialization.jsonObject(with: fieldData) as? [String: Any]
        {
            for (key, expected) in fields {
                try expectField(payload, key, expected, testCase.id) { name in
                    try Self.typedTime(name, of: jws, testCase.kind, verifier: verifier, now: now)
                }
            }
        }
    }

    /// The time `name` ("purchaseDate") of the typed payload the verifier decodes `jws` to: what the
    /// ledger decides on (an Xcode payload's fractional milliseconds floored).
    static func typedTime(_ name: String, of jws: String, _ kind: SignedDataKind, verifier: SignedDataVerifier, now: Int64) throws -> Int64? {
        switch kind {
        case .transaction:
            let transaction = try verifier.verifyTransaction(jws, now: now).get()
            let times = [
                "purchaseDate": transaction.purchaseDate, "originalPurchaseDate": transaction.originalPurchaseDate,
                "expiresDate": transaction.expiresDate, "signedDate": transaction.signedDate, "revocationDate": transaction.revocationDate,
            ]
            return times[name] ?? nil
        case .renewalInfo:
            let renewal = try verifier.verifyRenewalInfo(jws, now: now).get()
            let times = [
                "signedDate": renewal.signedDate, "renewalDate": renewal.renewalDate, "gracePeriodExpiresDate": renewal.gracePeriodExpiresDate,
                "recentSubscriptionStartDate": renewal.recentSubscriptionStartDate,
            ]
            return times[name] ?? nil
        default:
            return nil
        }
    }

    /// Compares one `fields` entry ("data.bundleId", "signedDateMs", null = absent) with the payload.
    /// Upstream expects Xcode's fractional milliseconds floored: a time signed with a fraction is
    /// compared as the typed payload decodes it (`typed`), never floored here.
    func expectField(
        _ payload: JSONMembers, _ key: String, _ expected: Any, _ id: String, typed: (String) throws -> Int64?
    ) throws {
        var path = key.split(separator: ".").map(String.init)
        var object = payload
        while path.count > 1 {
            object = try #require(object[path.removeFirst()]?.members, "\(id) \(key)")
        }
        var name = path[0]
        if object[name] == nil, name.hasSuffix("Ms") { name = String(name.dropLast(2)) }
        let actual = object[name]
        switch expected {
        case is NSNull:
            #expect(actual == nil || actual == .null, "\(id) \(key)")
        case let string as String:
            #expect(actual?.string == string, "\(id) \(key)")
        case let number as NSNumber where String(cString: number.objCType) == "c":
            #expect(actual == .bool(number.boolValue), "\(id) \(key)")
        case let number as NSNumber:
            switch actual {
            case .integer(let integer)?: #expect(integer == number.int64Value, "\(id) \(key)")
            case .number?: #expect(try typed(name) == number.int64Value, "\(id) \(key): the typed payload's time")
            default: Issue.record("\(id) \(key): \(String(describing: actual)) is not a number")
            }
        default:
            Issue.record("\(id) \(key): unexpected expectation \(expected)")
        }
    }
}
