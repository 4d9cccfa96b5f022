using System.IO.Pipelines;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Http.Features;
using PersistentServices.Sessions;

namespace PersistentServices.Http;

/// <summary>
/// Holds a persistent request's whole reply in memory while the endpoint runs: status, headers and body stay in the
/// process until the log is durable (seed 000 Fig. 7: a reply to an end client leaves only after the force). Used the
/// same way by live execution and by replay, so both produce the same <see cref="BufferedReply"/>.
/// </summary>
internal sealed class ResponseCapture : IHttpResponseFeature, IHttpResponseBodyFeature, IDisposable
{
    private static readonly HashSet<string> NotBuffered = new(StringComparer.OrdinalIgnoreCase)
    {
        "Date", "Server", "Connection", "Keep-Alive", "Transfer-Encoding", "Content-Length", "Upgrade", "Trailer",
    };

    private readonly MemoryStream _buffer = new();
    private readonly List<(Func<object, Task> Callback, object State)> _onStarting = [];
    private PipeWriter? _writer;

    public int StatusCode { get; set; } = StatusCodes.Status200OK;

    public string? ReasonPhrase { get; set; }

    public IHeaderDictionary Headers { get; set; } = new HeaderDictionary();

    [Obsolete("Use IHttpResponseBodyFeature.Stream")]
    public Stream Body
    {
        get => _buffer;
        set => throw new NotSupportedException("The body of a persistent reply cannot be replaced.");
    }

    public bool HasStarted => false;

    public Stream Stream => _buffer;

    public PipeWriter Writer => _writer ??= PipeWriter.Create(_buffer, new StreamPipeWriterOptions(leaveOpen: true));

    /// <summary>OnCompleted callbacks, handed to the real response when the reply is sent.</summary>
    public List<(Func<object, Task> Callback, object State)> OnCompletedCallbacks { get; } = [];

    public void OnStarting(Func<object, Task> callback, object state) => _onStarting.Add((callback, state));

    public void OnCompleted(Func<object, Task> callback, object state) => OnCompletedCallbacks.Add((callback, state));

    public void DisableBuffering()
    {
    }

    public Task StartAsync(CancellationToken cancellationToken = default) => Task.CompletedTask;

    public async Task SendFileAsync(string path, long offset, long? count, CancellationToken cancellationToken = default)
    {
        await using var file = new FileStream(path, FileMode.Open, FileAccess.Read, FileShare.Read);
        file.Position = offset;
        if (count is { } n)
        {
            var buffer = new byte[n];
            await file.ReadExactlyAsync(buffer, cancellationToken).ConfigureAwait(false);
            await _buffer.WriteAsync(buffer, cancellationToken).ConfigureAwait(false);
        }
        else
        {
            await file.CopyToAsync(_buffer, cancellationToken).ConfigureAwait(false);
        }
    }

    public async Task CompleteAsync()
    {
        if (_writer is not null)
        {
            await _writer.FlushAsync().ConfigureAwait(false);
        }
    }

    /// <summary>Discards what the endpoint produced and makes the reply an empty <paramref name="statusCode"/> (an endpoint threw).</summary>
    public async Task ResetAsync(int statusCode)
    {
        try
        {
            await CompleteAsync().ConfigureAwait(false);
        }
        catch (InvalidOperationException)
        {
            // A writer already completed by the endpoint: nothing left to flush.
        }

        _buffer.SetLength(0);
        Headers.Clear();
        _onStarting.Clear();
        StatusCode = statusCode;
        ReasonPhrase = null;
    }

    /// <summary>Runs the OnStarting callbacks (last registered first, as servers do) and freezes the reply.</summary>
    public async Task<BufferedReply> FinishAsync()
    {
        await CompleteAsync().ConfigureAwait(false);
        for (var i = _onStarting.Count - 1; i >= 0; i--)
        {
            await _onStarting[i].Callback(_onStarting[i].State).ConfigureAwait(false);
        }

        var headers = Headers
            .Where(h => !NotBuffered.Contains(h.Key))
            .Select(h => new KeyValuePair<string, string[]>(h.Key, h.Value.ToArray()!))
            .ToList();
        return new BufferedReply(StatusCode, headers, _buffer.ToArray());
    }

    public void Dispose() => _buffer.Dispose();

    /// <summary>Installs this capture on <paramref name="features"/>; returns what it replaced.</summary>
    public (IHttpResponseFeature? Response, IHttpResponseBodyFeature? Body) Install(IFeatureCollection features)
    {
        var previous = (features.Get<IHttpResponseFeature>(), features.Get<IHttpResponseBodyFeature>());
        features.Set<IHttpResponseFeature>(this);
        features.Set<IHttpResponseBodyFeature>(this);
        return previous;
    }
}

/// <summary>A request lifetime whose <see cref="RequestAborted"/> never fires: a logged request runs to completion even when its client disconnects.</summary>
internal sealed class UninterruptibleLifetime : IHttpRequestLifetimeFeature
{
    public CancellationToken RequestAborted
    {
        get => CancellationToken.None;
        set
        {
        }
    }

    public void Abort()
    {
    }
}
