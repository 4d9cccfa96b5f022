namespace PersistentServices.Client;

/// <summary>
/// A reply <see cref="PersistentSessionClient.RecoverAsync"/> hands back: the reply to a request the application sent
/// before the client process stopped and never received. Each is handed back at most once.
/// </summary>
/// <param name="OperationId">What the application named the request (<see cref="PersistentRequestOptions.OperationId"/>), or null.</param>
/// <param name="Method">The request's method.</param>
/// <param name="RequestUri">The request's absolute address.</param>
/// <param name="Response">
/// The reply (status, headers and body as the service sent them); the caller disposes it. Null when the service could no
/// longer tell whether the request ran (<see cref="PersistentRequestOutcomeUnknownException"/>): it is not sent again.
/// </param>
public sealed record RecoveredReply(string? OperationId, HttpMethod Method, Uri RequestUri, HttpResponseMessage? Response);
