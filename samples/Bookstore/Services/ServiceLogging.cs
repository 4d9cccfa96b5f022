using Microsoft.Extensions.Logging.Console;

namespace Bookstore.Services;

/// <summary>The console logging every bookstore process shares: one line per message, timestamped, no colours, no per-request ASP.NET Core lines.</summary>
internal static class ServiceLogging
{
    public static void UseSingleLineConsole(this ILoggingBuilder logging)
    {
        logging.AddSimpleConsole(o =>
        {
            o.SingleLine = true;
            o.TimestampFormat = "HH:mm:ss.fff ";
            o.ColorBehavior = LoggerColorBehavior.Disabled;
        });
        logging.AddFilter("Microsoft.AspNetCore", LogLevel.Warning);
    }
}
