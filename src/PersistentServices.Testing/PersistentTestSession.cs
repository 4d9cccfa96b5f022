using System.Globalization;
using System.Net.Http.Json;

namespace PersistentServices.Testing;

/// <summary>
/// One client session with a service under test, speaking the session protocol (docs/protocol.md): each new request
/// carries <c>PS-Session</c> and the next <c>PS-Seq</c>; <see cref="ResendAsync"/> repeats the last request with the same
/// number, as a client does after an error or a crash of the service. The session outlives restarts of the service.
/// Requests of one session are sent one at a time.
/// </summary>
public sealed class PersistentTestSession
{
    private readonly HttpClient _client;
    private (HttpMethod Method, string Path, byte[]? Body, string? ContentType)? _last;

    internal PersistentTestSession(HttpClient client, string id)
    {
        _client = client;
        Id = id;
    }

    /// <summary>The session id (<c>PS-Session</c>).</summary>
    public string Id { get; }

    /// <summary>The number of the last request sent (0 before the first).</summary>
    public long LastSequence { get; private set; }

    /// <summary>Sends a new persistent request with the next number; the body, if any, is kept for <see cref="ResendAsync"/>.</summary>
    /// <param name="method">The HTTP method.</param>
    /// <param name="path">The path and query, relative to the service.</param>
    /// <param name="content">The body, or null.</param>
    /// <param name="cancellationToken">Cancels the request (the number stays used: resend it).</param>
    /// <returns>The response; dispose it.</returns>
    /// <exception cref="HttpRequestException">The service could not be reached (crashed?): restart it and <see cref="ResendAsync"/>.</exception>
    public async Task<HttpResponseMessage> SendAsync(HttpMethod method, string path, HttpContent? content = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(method);
        ArgumentException.ThrowIfNullOrEmpty(path);
        var body = content is null ? null : await content.ReadAsByteArrayAsync(cancellationToken).ConfigureAwait(false);
        _last = (method, path, body, content?.Headers.ContentType?.ToString());
        LastSequence++;
        return await SendLastAsync(cancellationToken).ConfigureAwait(false);
    }

    /// <summary>Sends a new persistent POST with the next number.</summary>
    /// <param name="path">The path and query.</param>
    /// <param name="content">The body, or null.</param>
    /// <param name="cancellationToken">Cancels the request.</param>
    public Task<HttpResponseMessage> PostAsync(string path, HttpContent? content = null, CancellationToken cancellationToken = default)
        => SendAsync(HttpMethod.Post, path, content, cancellationToken);

    /// <summary>Sends a new persistent POST with <paramref name="value"/> as its JSON body and the next number.</summary>
    /// <typeparam name="T">The body's type.</typeparam>
    /// <param name="path">The path and query.</param>
    /// <param name="value">The body.</param>
    /// <param name="cancellationToken">Cancels the request.</param>
    public Task<HttpResponseMessage> PostAsJsonAsync<T>(string path, T value, CancellationToken cancellationToken = default)
        => SendAsync(HttpMethod.Post, path, JsonContent.Create(value), cancellationToken);

    /// <summary>
    /// Sends the last request again with the same number: the service answers it from its buffered reply
    /// (<c>PS-Replayed: true</c>) without running it again, or runs it now if it never reached the log.
    /// </summary>
    /// <param name="cancellationToken">Cancels the request.</param>
    /// <exception cref="InvalidOperationException">No request was sent yet.</exception>
    public Task<HttpResponseMessage> ResendAsync(CancellationToken cancellationToken = default)
    {
        if (_last is null)
        {
            throw new InvalidOperationException("No request was sent in this session yet: there is nothing to resend.");
        }

        return SendLastAsync(cancellationToken);
    }

    /// <summary>Sends a read-only request (<c>[PersistentReadOnly]</c> endpoints): with <c>PS-Session</c>, without a number.</summary>
    /// <param name="path">The path and query.</param>
    /// <param name="cancellationToken">Cancels the request.</param>
    public Task<HttpResponseMessage> GetAsync(string path, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrEmpty(path);
        var request = new HttpRequestMessage(HttpMethod.Get, new Uri(path, UriKind.Relative));
        request.Headers.TryAddWithoutValidation("PS-Session", Id);
        return SendDisposingAsync(request, cancellationToken);
    }

    private Task<HttpResponseMessage> SendLastAsync(CancellationToken cancellationToken)
    {
        var (method, path, body, contentType) = _last!.Value;
        var request = new HttpRequestMessage(method, new Uri(path, UriKind.Relative));
        request.Headers.TryAddWithoutValidation("PS-Session", Id);
        request.Headers.TryAddWithoutValidation("PS-Seq", LastSequence.ToString(CultureInfo.InvariantCulture));
        if (body is not null)
        {
            request.Content = new ByteArrayContent(body);
            if (contentType is not null)
            {
                request.Content.Headers.TryAddWithoutValidation("Content-Type", contentType);
            }
        }

        return SendDisposingAsync(request, cancellationToken);
    }

    private async Task<HttpResponseMessage> SendDisposingAsync(HttpRequestMessage request, CancellationToken cancellationToken)
    {
        using (request)
        {
            var response = await _client.SendAsync(request, cancellationToken).ConfigureAwait(false);
            await response.Content.LoadIntoBufferAsync(cancellationToken).ConfigureAwait(false);
            return response;
        }
    }
}
