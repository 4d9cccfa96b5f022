namespace PersistentServices.Client;

/// <summary>
/// The <see cref="DelegatingHandler"/> <c>AddPersistentSessions</c> puts into a named client's chain: every request goes
/// through <see cref="PersistentSessionClient"/>; the resilience handler after it retries each attempt with the same ids.
/// </summary>
internal sealed class PersistentSessionHandler(PersistentSessionClient client) : DelegatingHandler
{
    protected override Task<HttpResponseMessage> SendAsync(HttpRequestMessage request, CancellationToken cancellationToken)
        => client.SendAsync(request, (message, ct) => base.SendAsync(message, ct), cancellationToken);

    protected override HttpResponseMessage Send(HttpRequestMessage request, CancellationToken cancellationToken)
        => throw new NotSupportedException("Persistent sessions store and retry requests asynchronously: use SendAsync.");
}
