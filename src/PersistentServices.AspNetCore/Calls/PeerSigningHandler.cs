using PersistentServices.Hosting;
using PersistentServices.Http;

namespace PersistentServices.Calls;

/// <summary>
/// Signs every attempt of a call with the deployment's peer key (innermost: each retry gets a fresh timestamp), for
/// <paramref name="callee"/>: the called service's <see cref="PersistentServicesOptions.ServiceName"/>, named in
/// <c>PS-Callee</c> and covered by the signature, so the call is refused by any other service it is sent to.
/// </summary>
internal sealed class PeerSigningHandler(PersistentRuntime runtime, string callee) : DelegatingHandler
{
    protected override async Task<HttpResponseMessage> SendAsync(HttpRequestMessage request, CancellationToken cancellationToken)
    {
        if (request.Headers.Contains(ProtocolHeaders.Caller))
        {
            var body = request.Content is null ? [] : await request.Content.ReadAsByteArrayAsync(cancellationToken).ConfigureAwait(false);
            request.Headers.Remove(ProtocolHeaders.Callee);
            request.Headers.TryAddWithoutValidation(ProtocolHeaders.Callee, callee);
            request.Headers.Remove(ProtocolHeaders.Signature);
            request.Headers.TryAddWithoutValidation(ProtocolHeaders.Signature, runtime.Peers.Sign(new PeerMessage(
                request.Method.Method,
                request.RequestUri?.PathAndQuery ?? "",
                Header(request.Headers, ProtocolHeaders.Caller),
                callee,
                Header(request.Headers, ProtocolHeaders.Session),
                Header(request.Headers, ProtocolHeaders.Sequence),
                Header(request.Headers, ProtocolHeaders.Role),
                Header(request.Headers, ProtocolHeaders.Dv),
                request.Content is { } content ? Header(content.Headers, "Content-Type") : ""),
                body));
        }

        return await base.SendAsync(request, cancellationToken).ConfigureAwait(false);
    }

    /// <summary>A header's value as the callee reads it (one value; several as HttpClient writes them on one line).</summary>
    private static string Header(System.Net.Http.Headers.HttpHeaders headers, string name)
        => headers.TryGetValues(name, out var values) ? string.Join(", ", values) : "";
}
