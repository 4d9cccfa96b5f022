using System.Globalization;
using System.Text.Json;
using Microsoft.AspNetCore.Http;

namespace PersistentServices.Http;

/// <summary>Protocol errors as RFC 9457 problem details (docs/protocol.md, "Errors").</summary>
internal static class ProtocolProblems
{
    public static Task WriteAsync(HttpContext context, int status, string type, string title, string detail, long? expectedSequence = null)
    {
        var response = context.Response;
        response.StatusCode = status;
        response.ContentType = "application/problem+json";
        if (expectedSequence is { } expected)
        {
            response.Headers[ProtocolHeaders.ExpectedSequence] = expected.ToString(CultureInfo.InvariantCulture);
        }

        var body = JsonSerializer.SerializeToUtf8Bytes(new Dictionary<string, object?>
        {
            ["type"] = "urn:persistentservices:problem:" + type,
            ["title"] = title,
            ["status"] = status,
            ["detail"] = detail,
            ["expectedSequence"] = expectedSequence,
        });
        return response.Body.WriteAsync(body, CancellationToken.None).AsTask();
    }
}
