using System.Globalization;
using Microsoft.AspNetCore.Http;
using PersistentServices.Sessions;

namespace PersistentServices.Http;

/// <summary>Sends a held reply to the client: the one place a <see cref="BufferedReply"/> becomes a response.</summary>
internal static class ReplyWriter
{
    /// <summary>
    /// Writes <paramref name="reply"/> and registers <paramref name="onCompleted"/> on the real response (they run once
    /// it has gone to the client). With a <paramref name="session"/>, echoes <c>PS-Session</c>/<c>PS-Seq</c>, and marks a
    /// reply of an earlier execution with <c>PS-Replayed: true</c>. A client that went away is not an error: its retry
    /// gets the buffered reply.
    /// </summary>
    public static async Task WriteAsync(HttpContext context, BufferedReply reply, IReadOnlyList<(Func<object, Task> Callback, object State)>? onCompleted,
        Session? session = null, long sequence = 0, bool replayed = false)
    {
        var response = context.Response;
        if (onCompleted is not null)
        {
            for (var i = 0; i < onCompleted.Count; i++)
            {
                response.OnCompleted(onCompleted[i].Callback, onCompleted[i].State);
            }
        }

        response.StatusCode = reply.StatusCode;
        var headers = reply.Headers;
        for (var i = 0; i < headers.Count; i++)
        {
            response.Headers[headers[i].Key] = headers[i].Value;
        }

        if (session is not null)
        {
            response.Headers[ProtocolHeaders.Session] = session.IdText;
            response.Headers[ProtocolHeaders.Sequence] = sequence.ToString(CultureInfo.InvariantCulture);
            if (replayed)
            {
                response.Headers[ProtocolHeaders.Replayed] = "true";
            }
        }

        response.ContentLength = reply.Body.Length;
        try
        {
            await response.Body.WriteAsync(reply.Body, CancellationToken.None).ConfigureAwait(false);
        }
        catch (Exception ex) when (ex is IOException or OperationCanceledException or ObjectDisposedException)
        {
            // The client went away; its retry gets the buffered reply.
        }
    }
}
