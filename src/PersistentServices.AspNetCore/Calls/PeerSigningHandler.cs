using System.Text;
using PersistentServices.Hosting;
using PersistentServices.Http;

namespace PersistentServices.Calls;

/// <summary>Signs every attempt of a call with the deployment's peer key (innermost: each retry gets a fresh timestamp).</summary>
internal sealed class PeerSigningHandler(PersistentRuntime runtime) : DelegatingHandler
{
    protected override async Task<HttpResponseMessage> SendAsync(HttpRequestMessage request, CancellationToken cancellationToken)
    {
        if (request.Headers.Contains(ProtocolHeaders.Caller))
        {
            var key = runtime.Options.Calls.PeerKey
                      ?? throw new InvalidOperationException("PersistentServicesOptions.Calls.PeerKey is not set: calls between persistent services are signed with it (docs/calls.md).");
            var body = request.Content is null ? [] : await request.Content.ReadAsByteArrayAsync(cancellationToken).ConfigureAwait(false);
            request.Headers.Remove(ProtocolHeaders.Signature);
            request.Headers.TryAddWithoutValidation(ProtocolHeaders.Signature, PeerSignature.Sign(
                Encoding.UTF8.GetBytes(key),
                runtime.Time.GetUtcNow().ToUnixTimeMilliseconds(),
                request.Method.Method,
                request.RequestUri?.PathAndQuery ?? "",
                Header(request, ProtocolHeaders.Caller),
                Header(request, ProtocolHeaders.Session),
                Header(request, ProtocolHeaders.Sequence),
                Header(request, ProtocolHeaders.Role),
                Header(request, ProtocolHeaders.Dv),
                body));
        }

        return await base.SendAsync(request, cancellationToken).ConfigureAwait(false);
    }

    private static string Header(HttpRequestMessage request, string name)
        => request.Headers.TryGetValues(name, out var values) ? string.Join(",", values) : "";
}
