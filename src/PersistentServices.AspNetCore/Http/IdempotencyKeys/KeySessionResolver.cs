using Microsoft.Extensions.Logging;
using PersistentServices.Sessions;

namespace PersistentServices.Http.IdempotencyKeys;

/// <summary>
/// A generic client's <c>Idempotency-Key</c> instead of a session (docs/client.md): the request is request 1 of its key's
/// one-request key session, found or started under the caller's principal (<see cref="IdempotencyKeySessions"/>); what a
/// repeat of the key gets is decided in <see cref="IdempotencyKeyAdmission.ContinueAsync"/>.
/// </summary>
internal sealed class KeySessionResolver(IdempotencyKeySessions keySessions, ILogger logger) : ISessionResolver
{
    public ValueTask<bool> IdentifyAsync(PersistentRequest request)
    {
        request.Sequence = 1;
        return ValueTask.FromResult(true);
    }

    public ValueTask<Session?> ResolveAsync(PersistentRequest request)
        => keySessions.FindOrStartAsync(request.HttpContext, request.Key!, logger);

    public ValueTask<bool> DecidedAsync(PersistentRequest request) => IdempotencyKeyAdmission.ContinueAsync(request, logger);
}
