import AppleSignedData
import Foundation
import OwnershipLedger
import StrictJSON

/// `ledger bench sign`: turns a `--trust-decoded` workload (e.g. `gen_history.py`'s) into the same
/// lines carrying App Store JWS signed with the test PKI, as `SignedSubmissionTests` signs them: a
/// `transaction` becomes a `signedTransaction`, a `notification` a `signedPayload` whose
/// `data.transaction` becomes `data.signedTransactionInfo`. Other lines are copied. Submit the result,
/// without `--trust-decoded`, to a ledger initialised with `--root-certificate` the test `testCA.der`.
enum SignedWorkload {
    /// What ``run(input:output:fixtures:log:)`` reads under `fixtures`.
    static let fixtureFiles = ["testLeaf.der", "testIntermediate.der", "testCA.der", "testLeaf.key.pem"].map {
        "AppleSignedDataTests/Vectors/certs/" + $0
    }

    static func run(input: URL, output: URL, fixtures: URL, log: (String) -> Void) throws -> JSONObject {
        let certificates = fixtures.appendingPathComponent("AppleSignedDataTests/Vectors/certs")
        let chain = try ["testLeaf.der", "testIntermediate.der", "testCA.der"].map {
            [UInt8](try Data(contentsOf: certificates.appendingPathComponent($0)))
        }
        let key = try String(contentsOf: certificates.appendingPathComponent("testLeaf.key.pem"), encoding: .utf8)
        func sign(_ payload: JSONMembers) throws -> JSONValue {
            .string(try TestJWSSigner.sign(payload: Data(JSONWriter.render(.object(payload))), chain: chain, privateKeyPEM: key))
        }
        let text = try Data(contentsOf: input)
        var out: [UInt8] = []
        var lines = 0
        var signatures = 0
        let reader = JSONReader()
        for line in text.split(separator: UInt8(ascii: "\n")) where !SubmitProtocol.isBlank(line) {
            var members = try reader.object(line)
            if let transaction = members["transaction"]?.members {
                members["transaction"] = nil
                members["signedTransaction"] = try sign(transaction)
                signatures += 1
            } else if var notification = members["notification"]?.members {
                if var data = notification["data"]?.members, let transaction = data["transaction"]?.members {
                    data["transaction"] = nil
                    data["signedTransactionInfo"] = try sign(transaction)
                    notification["data"] = .object(data)
                    signatures += 1
                }
                members["notification"] = nil
                members["signedPayload"] = try sign(notification)
                signatures += 1
            }
            JSONWriter.write(.object(members), into: &out)
            out.append(UInt8(ascii: "\n"))
            lines += 1
            if lines % 5_000 == 0 { log("signed \(lines) lines") }
        }
        try Data(out).write(to: output)
        return ["lines": lines, "signatures": signatures, "out": output.path]
    }
}
