using System.Buffers;
using System.IO.Pipelines;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Http.Features;
using PersistentServices.Sessions;

namespace PersistentServices.Http;

/// <summary>
/// Holds a persistent request's whole reply in memory while the endpoint runs: status, headers and body stay in the
/// process until the log is durable ([MSP Fig. 7]: a reply to an end client leaves only after the force). Used the
/// same way by live execution and by replay, so both produce the same <see cref="BufferedReply"/>.
/// </summary>
internal sealed class ResponseCapture : IHttpResponseFeature, IHttpResponseBodyFeature
{
    private static readonly HashSet<string> NotBuffered = new(StringComparer.OrdinalIgnoreCase)
    {
        "Date", "Server", "Connection", "Keep-Alive", "Transfer-Encoding", "Content-Length", "Upgrade", "Trailer",
    };

    // The body goes straight into one growable buffer, through a PipeWriter and a Stream that both write to it (no
    // MemoryStream + StreamPipeWriter adapter pair per request).
    private readonly ArrayBufferWriter<byte> _buffer = new();
    private List<(Func<object, Task> Callback, object State)>? _onStarting;
    private List<(Func<object, Task> Callback, object State)>? _onCompleted;
    private BufferPipeWriter? _writer;
    private BufferStream? _stream;

    public int StatusCode { get; set; } = StatusCodes.Status200OK;

    public string? ReasonPhrase { get; set; }

    public IHeaderDictionary Headers { get; set; } = new HeaderDictionary();

    [Obsolete("Use IHttpResponseBodyFeature.Stream")]
    public Stream Body
    {
        get => Stream;
        set => throw new NotSupportedException("The body of a persistent reply cannot be replaced.");
    }

    public bool HasStarted => false;

    public Stream Stream => _stream ??= new BufferStream(_buffer);

    public PipeWriter Writer => _writer ??= new BufferPipeWriter(_buffer);

    /// <summary>OnCompleted callbacks, handed to the real response when the reply is sent (most endpoints register none).</summary>
    public IReadOnlyList<(Func<object, Task> Callback, object State)> OnCompletedCallbacks => (IReadOnlyList<(Func<object, Task> Callback, object State)>?)_onCompleted ?? [];

    public void OnStarting(Func<object, Task> callback, object state) => (_onStarting ??= []).Add((callback, state));

    public void OnCompleted(Func<object, Task> callback, object state) => (_onCompleted ??= []).Add((callback, state));

    public void DisableBuffering()
    {
    }

    public Task StartAsync(CancellationToken cancellationToken = default) => Task.CompletedTask;

    public async Task SendFileAsync(string path, long offset, long? count, CancellationToken cancellationToken = default)
    {
        var file = new FileStream(path, FileMode.Open, FileAccess.Read, FileShare.Read);
        await using (file.ConfigureAwait(false))
        {
            file.Position = offset;
            var remaining = count ?? file.Length - offset;
            while (remaining > 0)
            {
                var read = await file.ReadAsync(_buffer.GetMemory((int)Math.Min(remaining, 81920))[..(int)Math.Min(remaining, 81920)], cancellationToken).ConfigureAwait(false);
                if (read == 0)
                {
                    break;
                }

                _buffer.Advance(read);
                remaining -= read;
            }
        }
    }

    public Task CompleteAsync() => Task.CompletedTask;

    /// <summary>Discards what the endpoint produced and makes the reply an empty <paramref name="statusCode"/> (an endpoint or an OnStarting callback threw).</summary>
    public void Reset(int statusCode)
    {
        _buffer.Clear();
        Headers.Clear();
        _onStarting?.Clear();
        StatusCode = statusCode;
        ReasonPhrase = null;
    }

    /// <summary>Runs the OnStarting callbacks, last registered first (as servers do), each once.</summary>
    public async Task RunOnStartingAsync()
    {
        while (_onStarting is { Count: > 0 })
        {
            var (callback, state) = _onStarting[^1];
            _onStarting.RemoveAt(_onStarting.Count - 1);
            await callback(state).ConfigureAwait(false);
        }
    }

    /// <summary>Freezes the reply: status, the headers a client must see again, body.</summary>
    public BufferedReply Freeze()
    {
        var headers = new List<KeyValuePair<string, string[]>>(Headers.Count);
        foreach (var (name, values) in Headers)
        {
            if (!NotBuffered.Contains(name))
            {
                headers.Add(new KeyValuePair<string, string[]>(name, values.ToArray()!));
            }
        }

        return new BufferedReply(StatusCode, headers, _buffer.WrittenSpan.ToArray());
    }

    private sealed class BufferPipeWriter(ArrayBufferWriter<byte> buffer) : PipeWriter
    {
        public override bool CanGetUnflushedBytes => true;

        public override long UnflushedBytes => 0;

        public override void Advance(int bytes) => buffer.Advance(bytes);

        public override Memory<byte> GetMemory(int sizeHint = 0) => buffer.GetMemory(sizeHint);

        public override Span<byte> GetSpan(int sizeHint = 0) => buffer.GetSpan(sizeHint);

        public override void CancelPendingFlush()
        {
        }

        public override void Complete(Exception? exception = null)
        {
        }

        public override ValueTask<FlushResult> FlushAsync(CancellationToken cancellationToken = default) => new(new FlushResult(false, false));
    }

    private sealed class BufferStream(ArrayBufferWriter<byte> buffer) : Stream
    {
        public override bool CanRead => false;

        public override bool CanSeek => false;

        public override bool CanWrite => true;

        public override long Length => buffer.WrittenCount;

        public override long Position
        {
            get => buffer.WrittenCount;
            set => throw new NotSupportedException();
        }

        public override void Flush()
        {
        }

        public override Task FlushAsync(CancellationToken cancellationToken) => Task.CompletedTask;

        public override int Read(byte[] buffer, int offset, int count) => throw new NotSupportedException();

        public override long Seek(long offset, SeekOrigin origin) => throw new NotSupportedException();

        public override void SetLength(long value) => throw new NotSupportedException();

        public override void Write(byte[] buffer, int offset, int count) => Write(buffer.AsSpan(offset, count));

        public override void Write(ReadOnlySpan<byte> source) => buffer.Write(source);

        public override Task WriteAsync(byte[] buffer, int offset, int count, CancellationToken cancellationToken)
        {
            Write(buffer.AsSpan(offset, count));
            return Task.CompletedTask;
        }

        public override ValueTask WriteAsync(ReadOnlyMemory<byte> source, CancellationToken cancellationToken = default)
        {
            buffer.Write(source.Span);
            return default;
        }
    }
}
