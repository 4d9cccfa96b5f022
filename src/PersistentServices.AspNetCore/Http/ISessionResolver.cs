using PersistentServices.Sessions;

namespace PersistentServices.Http;

/// <summary>
/// How a persistent request names its session, in <see cref="RequestAdmission"/>'s order: the session protocol's headers
/// (<see cref="HeaderSessionResolver"/>), or an <c>Idempotency-Key</c> whose one-request key session it finds or starts
/// (<see cref="IdempotencyKeys.KeySessionResolver"/>). Every method writes its refusal itself and then returns false (null).
/// </summary>
internal interface ISessionResolver
{
    /// <summary>Before anything else is read: the request's number (<see cref="PersistentRequest.Sequence"/>) and what names its session.</summary>
    ValueTask<bool> IdentifyAsync(PersistentRequest request);

    /// <summary>Once the body is read and the caller verified: the session, found (owned by the caller) or started.</summary>
    ValueTask<Session?> ResolveAsync(PersistentRequest request);

    /// <summary>After the session's decision (<see cref="PersistentRequest.Admission"/>): true when the handler goes on with it.</summary>
    ValueTask<bool> DecidedAsync(PersistentRequest request);
}
