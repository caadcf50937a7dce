import Foundation
import LedgerCrypto
import StrictJSON
import Testing

@testable import AppleSignedData

/// JWS signed by the tests themselves with the Apple library test PKI (testLeaf.key.pem).
@Suite struct SignedJWSTests {
    let verifier: SignedDataVerifier
    init() throws { verifier = try Vectors.verifier() }

    func expectFailure(_ jws: String, _ code: VerificationError.Code, containing text: String = "", now: Int64 = Vectors.nowMs) {
        let result = verifier.verifyTransaction(jws, now: now)
        #expect(result.failure?.code == code, "\(result)")
        if !text.isEmpty { #expect(result.failure?.message.contains(text) == true, "\(result)") }
    }

    @Test func validTransactionVerifiesAndDecodes() throws {
        let jws = try Vectors.sign(Vectors.transactionPayload())
        let transaction = try verifier.verifyTransaction(jws, now: 0).get()
        #expect(transaction.originalTransactionId == "1000")
        #expect(transaction.transactionId == "1001")
        #expect(transaction.productId == "com.example.pro")
        #expect(transaction.bundleId == "com.example")
        #expect(transaction.environment == .sandbox)
        #expect(transaction.signedDate == Vectors.nowMs)
        #expect(transaction.expiresDate == Vectors.nowMs + 86_400_000)
        #expect(transaction.quantity == 1)
        #expect(!transaction.isFamilyShared)

        let inspected = try verifier.inspect(jws, now: 0).get()
        #expect(inspected.kind == .transaction)
        #expect(inspected.signatureVerified)
        #expect(inspected.validatedAt == Vectors.effectiveDate)
        #expect(inspected.leafSubject?.contains("O=Leaf") == true)
        #expect(inspected.payload["transactionId"] == "1001")
    }

    @Test func familySharedIsFlaggedNotRejected() throws {
        let jws = try Vectors.sign(Vectors.transactionPayload(["inAppOwnershipType": "FAMILY_SHARED"]))
        let transaction = try verifier.verifyTransaction(jws, now: Vectors.nowMs).get()
        #expect(transaction.isFamilyShared)
        #expect(transaction.inAppOwnershipType == "FAMILY_SHARED")
    }

    @Test func tamperedPayloadFails() throws {
        let original = try Vectors.sign(Vectors.transactionPayload()).split(separator: ".")
        let other = try Vectors.sign(Vectors.transactionPayload(["productId": "com.example.lifetime"])).split(separator: ".")
        expectFailure([original[0], other[1], original[2]].joined(separator: "."), .verificationFailed, containing: "does not verify")
    }

    @Test func tamperedSignatureFails() throws {
        let parts = try Vectors.sign(Vectors.transactionPayload()).split(separator: ".").map(String.init)
        var signature = try #require(Base64URL.decode(Substring(parts[2])))
        signature[10] ^= 0x01
        expectFailure([parts[0], parts[1], Base64URL.encode(signature)].joined(separator: "."), .verificationFailed)
        expectFailure(
            [parts[0], parts[1], Base64URL.encode(Array(signature.prefix(63)))].joined(separator: "."), .verificationFailed, containing: "63 bytes")
        expectFailure([parts[0], parts[1], ""].joined(separator: "."), .verificationFailed, containing: "0 bytes")
    }

    @Test(arguments: ["HS256", "RS256", "none", "ES384", "es256"])
    func wrongAlgorithmIsRejected(_ alg: String) throws {
        let x5c = Vectors.goodChain.map { Data($0).base64EncodedString() }
        let jws = try Vectors.sign(Vectors.transactionPayload(), header: ["alg": alg, "x5c": x5c])
        expectFailure(jws, .invalidJWSFormat, containing: "only ES256 is accepted")
    }

    @Test func algNoneWithEmptySignatureIsRejected() throws {
        let header = Base64URL.encode(Array(#"{"alg":"none"}"#.utf8))
        let payload = try JSONSerialization.data(withJSONObject: Vectors.transactionPayload())
        expectFailure(header + "." + Base64URL.encode([UInt8](payload)) + ".", .invalidJWSFormat, containing: "\"none\"")
    }

    @Test func missingAlgIsRejected() throws {
        let x5c = Vectors.goodChain.map { Data($0).base64EncodedString() }
        expectFailure(try Vectors.sign(Vectors.transactionPayload(), header: ["x5c": x5c]), .invalidJWSFormat, containing: "no alg")
    }

    @Test func missingX5CIsRejected() throws {
        expectFailure(try Vectors.sign(Vectors.transactionPayload(), header: ["alg": "ES256"]), .invalidJWSFormat, containing: "no x5c")
        expectFailure(try Vectors.sign(Vectors.transactionPayload(), header: ["alg": "ES256", "x5c": "abc"]), .invalidJWSFormat)
    }

    @Test func x5cWithTwoOrOneCertificatesIsRejected() throws {
        let two = try Vectors.sign(Vectors.transactionPayload(), chain: [Vectors.testLeaf, Vectors.testIntermediate])
        expectFailure(two, .invalidJWSFormat, containing: "x5c holds 2 certificates; exactly 3 are required")
        let one = try Vectors.sign(Vectors.transactionPayload(), chain: [Vectors.testLeaf])
        let result = verifier.verifyTransaction(one, now: Vectors.nowMs)
        #expect(result.failure == VerificationError(.invalidJWSFormat, "x5c holds 1 certificate; exactly 3 are required"))
        let four = try Vectors.sign(Vectors.transactionPayload(), chain: Vectors.goodChain + [Vectors.testCA])
        expectFailure(four, .invalidJWSFormat, containing: "x5c holds 4 certificates")
    }

    @Test func invalidOIDLeafIsRejected() throws {
        let leaf = try Vectors.der("certs/testInvalidOIDLeaf.der")
        let jws = try Vectors.sign(Vectors.transactionPayload(), chain: [leaf, Vectors.testIntermediate, Vectors.testCA])
        expectFailure(jws, .invalidChain, containing: "leaf certificate lacks the App Store receipt-signing extension OID 1.2.840.113635.100.6.11.1")
    }

    @Test func invalidOIDIntermediateIsRejected() throws {
        let leaf = try Vectors.der("certs/testInvalidIntermediateLeaf.der")
        let intermediate = try Vectors.der("certs/testInvalidOIDIntermediate.der")
        let jws = try Vectors.sign(Vectors.transactionPayload(), chain: [leaf, intermediate, Vectors.testCA])
        expectFailure(jws, .invalidChain, containing: "intermediate certificate lacks the Apple WWDR extension OID 1.2.840.113635.100.6.2.1")
        // Swift and Java upstream pair the good leaf with the bad intermediate: same verdict.
        let jws2 = try Vectors.sign(Vectors.transactionPayload(), chain: [Vectors.testLeaf, intermediate, Vectors.testCA])
        expectFailure(jws2, .invalidChain, containing: "1.2.840.113635.100.6.2.1")
    }

    @Test func expiredChainAtSignedDateIsRejected() throws {
        let jws = try Vectors.sign(Vectors.transactionPayload(["signedDate": 2_280_946_846_000]))
        expectFailure(jws, .invalidChain, containing: "certificate has expired")
        // signedDate, not `now`, decides: a current `now` does not rescue it.
        expectFailure(jws, .invalidChain, containing: "at 2280946846", now: Vectors.nowMs)
    }

    @Test(arguments: [Int64.min, Int64.max, -1, -62_135_769_600_000, 253_402_300_800_000])
    func extremeSignedDatesAreRejectedWithoutCrashing(_ signedDate: Int64) throws {
        expectFailure(try Vectors.sign(Vectors.transactionPayload(["signedDate": signedDate])), .invalidChain)
    }

    @Test func notYetValidAtSignedDateIsRejected() throws {
        let jws = try Vectors.sign(Vectors.transactionPayload(["signedDate": 1_600_000_000_000]))
        expectFailure(jws, .invalidChain, containing: "not yet valid")
    }

    @Test func nowIsUsedOnlyWithoutSignedDate() throws {
        var payload = Vectors.transactionPayload()
        payload["signedDate"] = nil
        let jws = try Vectors.sign(payload)
        let inspected = try verifier.inspect(jws, now: Vectors.nowMs + 999).get()
        #expect(inspected.validatedAt == Vectors.effectiveDate)
        expectFailure(jws, .invalidChain, containing: "certificate has expired", now: 2_280_946_846_000)
        // The chain verifies but the typed payload requires signedDate.
        expectFailure(jws, .invalidPayload, containing: "transaction is missing signedDate")
    }

    @Test func wrongRootIsRejected() throws {
        let apple = try SignedDataVerifier(configuration: VerifierConfiguration(bundleId: "com.example", environment: .sandbox))
        let result = apple.verifyTransaction(try Vectors.sign(Vectors.transactionPayload()), now: Vectors.nowMs)
        #expect(result.failure?.code == .invalidChain)
        #expect(result.failure?.message.contains("unable to get local issuer certificate") == true, "\(result)")
    }

    @Test func x5cRootIsNeverTrusted() throws {
        // The presented root is ignored: a G3 entry in x5c[2] still verifies against the configured testCA …
        let g3 = AppleRootCertificates.appleRootCAG3
        let jws = try Vectors.sign(Vectors.transactionPayload(), chain: [Vectors.testLeaf, Vectors.testIntermediate, g3])
        #expect(throws: Never.self) { try verifier.verifyTransaction(jws, now: Vectors.nowMs).get() }
        // … and presenting testCA does not make a G3-configured verifier trust it.
        let apple = try SignedDataVerifier(configuration: VerifierConfiguration(bundleId: "com.example", environment: .sandbox))
        #expect(apple.verifyTransaction(try Vectors.sign(Vectors.transactionPayload()), now: Vectors.nowMs).failure?.code == .invalidChain)
    }

    @Test func selfSignedLeafAsIntermediateIsRejected() throws {
        // Leaf signs for itself: the chain cannot be built to the configured root.
        let jws = try Vectors.sign(Vectors.transactionPayload(), chain: [Vectors.testLeaf, Vectors.testLeaf, Vectors.testCA])
        expectFailure(jws, .invalidChain)
    }

    @Test func rootAsIntermediateGivesShortChain() throws {
        // x5c = [intermediate, root, root] with the intermediate acting as leaf: the path is only 2 long.
        let jws = try Vectors.sign(Vectors.transactionPayload(), chain: [Vectors.testIntermediate, Vectors.testCA, Vectors.testCA])
        let result = verifier.verifyTransaction(jws, now: Vectors.nowMs)
        #expect(result.failure?.code == .invalidChain, "\(result)")
    }

    /// Found by X509Fuzzer: a leaf whose public key does not decode makes OpenSSL 3.0's X509_verify_cert return -1
    /// ("internal error"). That is an invalid chain, never a libcrypto failure.
    @Test func leafWhosePublicKeyDoesNotDecodeIsAnInvalidChain() throws {
        let base64 =
            "MIIBnzCCAUWgAwIBAgIBCzAKBggqhkjOPQQDAzA2MQswCQYDVQQGEwJVUzETMBEGA1UECAwKQ2FsaWZvcm5pYTESMBAGA1UEBwwJ"
            + "Q3VwZXJ0aW5vMB4XDTIzMDEwNTIxMzEwNVoXDTMzMDEwMTIxMzEwNVowRTELMAkGA1UEBhMCVVMxCzAJBgNVBAgMAkNBMRIwEAYD"
            + "VQQHDAlDdXBlcnRpbm8xFTATBgNVBAoMDEludGVybWVkaWF0ZTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABBUN5V9rKjfRiMAI"
            + "ojEA0Av5Mp0oF+O0cL4gzrTF178inUHugj7Et46NrkQ7hKgMVnjogq45Q1rMs+cMFVNILWqjNTAzMA8GA1UdEwQIMAYBAf8CAQAw"
            + "DgYDVR0PAQH/BAQDAgEGMBAGCiqGSIb3Y2QGAgEEAgUAMAoGCCqGSM49BAMDA0gAMEUCIQCmsIKYs41ullssHX4rVveUT0Z7Is5/"
            + "hLK1lFPTtun3hAIgc2+2RG5+gNcFVcs+XJeEl4GZ+ojl3ROOmll+ye7dynQ="
        let leaf = try #require(Data(base64Encoded: base64))
        let jws = try Vectors.sign(Vectors.transactionPayload(), chain: [[UInt8](leaf), Vectors.testIntermediate, Vectors.testCA])
        expectFailure(jws, .invalidChain, containing: "unable to get certs public key")
    }

    @Test func wrongBundleIdIsRejected() throws {
        let jws = try Vectors.sign(Vectors.transactionPayload(["bundleId": "com.other"]))
        expectFailure(jws, .invalidAppIdentifier, containing: "bundleId \"com.other\" does not match the configured \"com.example\"")
    }

    @Test func wrongEnvironmentIsRejected() throws {
        expectFailure(try Vectors.sign(Vectors.transactionPayload(["environment": "Production"])), .invalidEnvironment, containing: "\"Production\"")
        expectFailure(try Vectors.sign(Vectors.transactionPayload(["environment": "Xcode"])), .invalidEnvironment)
        // Bundle is checked before environment.
        expectFailure(try Vectors.sign(Vectors.transactionPayload(["environment": "Production", "bundleId": "x"])), .invalidAppIdentifier)
    }

    @Test func undecodableCertificateIsRejected() throws {
        let leaf64 = Data(Vectors.testLeaf).base64EncodedString()
        let rest = [Vectors.testIntermediate, Vectors.testCA].map { Data($0).base64EncodedString() }
        for (bad, text) in [
            ("abc", "not valid base64"), (leaf64 + "a", "not valid base64"), (leaf64 + "==", "not valid base64"),
            (Data("abc123".utf8).base64EncodedString(), "not a DER"),
            (Data(Vectors.testLeaf + [0]).base64EncodedString(), "not a DER"),
        ] {
            let jws = try Vectors.sign(Vectors.transactionPayload(), header: ["alg": "ES256", "x5c": [bad] + rest])
            expectFailure(jws, .invalidCertificate, containing: "x5c[0] is \(text)")
        }
        let jws = try Vectors.sign(Vectors.transactionPayload(), header: ["alg": "ES256", "x5c": [leaf64, 42, rest[1]]])
        expectFailure(jws, .invalidCertificate, containing: "x5c[1] is not a string")
    }

    @Test func malformedShapesAreRejected() throws {
        let parts = try Vectors.sign(Vectors.transactionPayload()).split(separator: ".").map(String.init)
        for bad in [
            "", "a", "a.b", "a.b.c.d", "....", parts[0] + "." + parts[1], parts.joined(separator: ".") + ".",
            parts[0] + "=." + parts[1] + "." + parts[2], " " + parts.joined(separator: "."),
            Base64URL.encode(Array("[1]".utf8)) + "." + parts[1] + "." + parts[2],
            parts[0] + "." + Base64URL.encode(Array("\"str\"".utf8)) + "." + parts[2],
        ] {
            expectFailure(bad, .invalidJWSFormat)
        }
    }

    @Test func wrongPayloadTypesAreInvalidPayload() throws {
        expectFailure(
            try Vectors.sign(Vectors.transactionPayload(["expiresDate": "soon"])), .invalidPayload,
            containing: "transaction.expiresDate must be a whole number of milliseconds")
        expectFailure(try Vectors.sign(Vectors.transactionPayload(["signedDate": "x"])), .invalidPayload, containing: "signedDate")
        var payload = Vectors.transactionPayload()
        payload["originalTransactionId"] = nil
        expectFailure(try Vectors.sign(payload), .invalidPayload, containing: "transaction is missing originalTransactionId")
    }

    @Test func renewalInfoChecksEnvironmentOnly() throws {
        let jws = try Vectors.sign(Vectors.renewalPayload(["bundleId": "com.other"]))
        let renewal = try verifier.verifyRenewalInfo(jws, now: 0).get()
        #expect(renewal.autoRenewStatus == 1)
        #expect(renewal.autoRenewProductId == "com.example.pro")
        let production = try Vectors.sign(Vectors.renewalPayload(["environment": "Production"]))
        #expect(verifier.verifyRenewalInfo(production, now: 0).failure?.code == .invalidEnvironment)
    }

    @Test func configurationIsValidated() throws {
        func code(_ configuration: VerifierConfiguration) -> VerificationError.Code? {
            do {
                _ = try SignedDataVerifier(configuration: configuration)
                return nil
            } catch { return error.code }
        }
        #expect(code(VerifierConfiguration(bundleId: "b", environment: .sandbox, rootCertificates: [])) == .invalidConfiguration)
        #expect(code(VerifierConfiguration(bundleId: "b", environment: .sandbox, rootCertificates: [[1, 2, 3]])) == .invalidConfiguration)
        #expect(code(VerifierConfiguration(bundleId: "b", environment: .production)) == .invalidConfiguration)
        #expect(code(VerifierConfiguration(bundleId: "b", environment: .production, appAppleId: 1)) == nil)
        #expect(code(VerifierConfiguration(bundleId: "b", environment: .xcode)) == .invalidConfiguration)
        #expect(code(VerifierConfiguration(bundleId: "b", environment: .localTesting, allowLocalTesting: true)) == nil)
    }

    @Test func localTestingSkipsSignaturesButChecksIdentity() throws {
        let local = try Vectors.verifier(environment: .localTesting)
        // Garbage signature and no x5c: accepted, because nothing is verified in LocalTesting.
        let header = Base64URL.encode(Array(#"{"alg":"ES256"}"#.utf8))
        let payload = try JSONSerialization.data(withJSONObject: Vectors.transactionPayload(["environment": "LocalTesting"]))
        let jws = header + "." + Base64URL.encode([UInt8](payload)) + "." + Base64URL.encode([1, 2, 3])
        let transaction = try local.verifyTransaction(jws, now: 0).get()
        #expect(transaction.environment == .localTesting)
        #expect(try local.inspect(jws, now: 0).get().signatureVerified == false)
        // A Sandbox or Production payload is not accepted by a LocalTesting verifier.
        let sandbox = try Vectors.sign(Vectors.transactionPayload())
        #expect(local.verifyTransaction(sandbox, now: 0).failure?.code == .invalidEnvironment)
    }

    @Test func appleRootG3IsEmbedded() throws {
        #expect(
            try Digest.sha256(AppleRootCertificates.appleRootCAG3).hex.uppercased()
                == "63343ABFB89A6A03EBB57E9B3F5FA7BE7C4F5C756F3017B3A8C488C3653E9179")
        #expect(AppleRootCertificates.appleRootCAG3 == (try Vectors.der("certs/AppleRootCA-G3.cer")))
        #expect(VerifierConfiguration(bundleId: "b", environment: .sandbox).rootCertificates == [AppleRootCertificates.appleRootCAG3])
    }

    @Test func signerProducesJOSESignatures() throws {
        let jws = try Vectors.sign(["a": 1])
        let parts = jws.split(separator: ".")
        #expect(parts.count == 3)
        #expect(Base64URL.decode(parts[2])?.count == 64)
        let header = try #require(try JSONSerialization.jsonObject(with: Data(Base64URL.decode(parts[0]) ?? [])) as? [String: Any])
        #expect(header["alg"] as? String == "ES256")
        #expect((header["x5c"] as? [String])?.count == 3)
        #expect(throws: (any Error).self) { try TestJWSSigner.sign(payload: ["a": 1], chain: [], privateKeyPEM: "not a key") }
    }
}
