using System.Buffers;
using System.IO.Pipelines;
using Microsoft.AspNetCore.Http.Features;

namespace PersistentServices.Http;

/// <summary>The logged body as the request's <see cref="PipeReader"/> (no stream adapter).</summary>
internal sealed class LoggedBodyPipe(byte[] body) : IRequestBodyPipeFeature
{
    public PipeReader Reader { get; } = PipeReader.Create(new ReadOnlySequence<byte>(body));
}

/// <summary>A request lifetime whose <see cref="RequestAborted"/> never fires: a logged request runs to completion even when its client disconnects.</summary>
internal sealed class UninterruptibleLifetime : IHttpRequestLifetimeFeature
{
    public static readonly UninterruptibleLifetime Instance = new();

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
