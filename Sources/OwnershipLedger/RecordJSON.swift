import Foundation
public import LedgerCore

/// JSON renderings of records for `ledger log`, replays and exports. Accounts appear as pseudonyms
/// and lineages as keyed hashes, exactly as stored.
public enum RecordJSON {
    public static func render(_ record: Record) -> JSONObject {
        var object = fields(of: record.event)
        object["event"] = record.event.name
        object["seq"] = record.sequence
        object["recordedAt"] = LedgerTime.format(record.recordedAt)
        object["eventId"] = record.eventId.hex
        object["schemaVersion"] = Int(record.schemaVersion)
        object["previousHash"] = record.previousHash.hex
        object["hash"] = record.hash.hex
        return object
    }

    /// The event's own fields.
    public static func fields(of event: LedgerEvent) -> JSONObject {
        switch event {
        case .transactionSubmitted(let e):
            var object: JSONObject = ["kind": e.kind.name, "lineage": e.lineage.description, "transaction": transaction(e.transaction)]
            if let account = e.account { object["account"] = account.description }
            return object
        case .notificationReceived(let e):
            var object: JSONObject = [
                "notificationKey": e.notificationKey.hex, "notificationType": e.notificationType,
                "signedDate": LedgerTime.format(e.signedDate),
            ]
            if let subtype = e.subtype { object["subtype"] = subtype }
            if let lineage = e.lineage { object["lineage"] = lineage.description }
            if let t = e.transaction { object["transaction"] = transaction(t) }
            return object
        case .accountDeletionRequested(let account), .accountDeleted(let account):
            return ["account": account.description]
        case .lineageBound(let lineage, let account), .entitlementReinstated(let lineage, let account):
            return ["lineage": lineage.description, "account": account.description]
        case .lineageTombstoned(let lineage, let account):
            return ["lineage": lineage.description, "formerAccount": account.description]
        case .entitlementGranted(let e):
            return [
                "lineage": e.lineage.description, "account": e.account.description, "productId": e.productId,
                "expiresAt": e.expiresAt.map(LedgerTime.format) ?? NSNull(),
            ]
        case .entitlementEnded(let lineage, let account, let reason):
            return ["lineage": lineage.description, "account": account.description, "reason": reason.name]
        case .entitlementRevoked(let lineage, let account, let revokedAt):
            return ["lineage": lineage.description, "account": account.description, "revokedAt": LedgerTime.format(revokedAt)]
        case .staffEnrolled(let e):
            return [
                "staff": e.staff, "roles": e.roles.names, "publicKey": e.publicKey.hex, "enrolledBy": e.enrolledBy ?? NSNull(),
                "ownAccount": e.ownAccount?.description ?? NSNull(), "signature": e.signature.hex,
            ]
        case .staffRemoved(let e):
            return ["staff": e.staff, "removedBy": e.removedBy, "signature": e.signature.hex]
        case .transferRequested(let e):
            return [
                "caseId": e.plan.caseId, "lineage": e.plan.lineage.description, "source": source(e.plan.source),
                "target": e.plan.target.description, "lineageVersion": e.plan.lineageVersion,
                "targetAuthentication": e.plan.targetAuthentication, "ownershipEvidence": e.plan.ownershipEvidence,
                "reason": e.plan.reason, "planDigest": e.planDigest.hex, "requestedBy": e.requestedBy,
                "signature": e.signature.hex,
            ]
        case .transferApproved(let e):
            return ["caseId": e.caseId, "planDigest": e.planDigest.hex, "approvedBy": e.approvedBy, "signature": e.signature.hex]
        case .transferApplied(let e):
            return [
                "caseId": e.caseId, "planDigest": e.planDigest.hex, "lineage": e.lineage.description, "source": source(e.source),
                "target": e.target.description, "appliedBy": e.appliedBy,
            ]
        case .transferRefused(let e):
            return ["caseId": e.caseId, "step": e.step, "staff": e.staff, "reason": e.reason]
        case .decisionIssued(let e):
            var object: JSONObject = [
                "decision": e.reason.outcome.rawValue, "code": e.reason.code, "message": e.reason.message,
            ]
            if let lineage = e.lineage { object["lineage"] = lineage.description }
            if let account = e.account { object["account"] = account.description }
            return object
        }
    }

    static func transaction(_ t: TransactionFacts) -> JSONObject {
        [
            "transactionKey": t.transactionKey.hex, "productId": t.productId, "purchaseDate": LedgerTime.format(t.purchaseDate),
            "expiresDate": t.expiresDate.map(LedgerTime.format) ?? NSNull(),
            "revocationDate": t.revocationDate.map(LedgerTime.format) ?? NSNull(),
            "inAppOwnershipType": t.ownership.appleValue, "environment": t.environment,
            "signedDate": LedgerTime.format(t.signedDate),
            "provenance": t.provenance == .verifiedJWS ? "verified-jws" : t.provenance == .trustedDecoded ? "trusted-decoded" : "legacy-receipt",
        ]
    }

    static func source(_ source: PlanSource) -> JSONObject {
        switch source {
        case .bound(let account): ["state": "bound", "account": account.description]
        case .tombstoned(let account): ["state": "tombstoned", "formerAccount": account.description]
        }
    }
}
