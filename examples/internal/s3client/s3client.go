// Package s3client builds the S3 client of the example programs from the
// standard AWS configuration (environment, shared config and credentials
// files, instance roles), with their flags on top. It is the only place
// that loads credentials: the library never does.
package s3client

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Config is what the flags say; the zero value is plain AWS S3.
type Config struct {
	// Endpoint is the URL of an S3-compatible store; "" means AWS (or
	// AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL).
	Endpoint string
	// Region overrides AWS_REGION and the profile's.
	Region    string
	PathStyle bool
	// HTTPClient, if set, sends the requests.
	HTTPClient *http.Client
	// LookupEnv reads the environment; nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
}

// RegisterFlags defines -s3-endpoint, -s3-region and -s3-path-style on fs,
// setting cfg, with cfg's values as their defaults.
func (cfg *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&cfg.Endpoint, "s3-endpoint", cfg.Endpoint, "S3 endpoint `URL` of a compatible store (default: AWS, or AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL)")
	fs.StringVar(&cfg.Region, "s3-region", cfg.Region, "S3 `region` (default: AWS_REGION or the AWS profile; us-east-1 with -s3-endpoint)")
	fs.BoolVar(&cfg.PathStyle, "s3-path-style", cfg.PathStyle, "use path-style S3 addressing (most compatible stores want it)")
}

// New returns a client for cfg and the AWS configuration it was made from.
// With an endpoint (from cfg or the environment), which means a compatible
// store, the region defaults to us-east-1 and request checksums are sent
// only when required, unless the environment chooses otherwise: most such
// stores take any region, and many refuse the SDK's default checksums.
func New(ctx context.Context, cfg Config) (*s3.Client, aws.Config, error) {
	lookup := cfg.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var opts []func(*awsconfig.LoadOptions) error
	if cfg.Region != "" {
		opts = append(opts, awsconfig.WithRegion(cfg.Region))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, awsconfig.WithHTTPClient(cfg.HTTPClient))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, awsCfg, fmt.Errorf("load AWS configuration: %w", err)
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		// Records and markers are written without checksums; without this
		// the SDK's default logger writes a line to stderr for every GET
		// of one.
		o.DisableLogOutputChecksumValidationSkipped = true
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		if cfg.PathStyle {
			o.UsePathStyle = true
		}
		if o.BaseEndpoint == nil {
			return
		}
		if o.Region == "" {
			o.Region = "us-east-1"
		}
		// LoadDefaultConfig turns an unset choice into "when supported",
		// never leaving it unset, so the environment tells whether the
		// operator made one.
		if _, set := lookup("AWS_REQUEST_CHECKSUM_CALCULATION"); !set {
			o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		}
		if _, set := lookup("AWS_RESPONSE_CHECKSUM_VALIDATION"); !set {
			o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		}
	})
	if client.Options().Region == "" {
		return nil, awsCfg, errors.New("no region: set -s3-region or AWS_REGION (or a region in your AWS profile)")
	}
	return client, awsCfg, nil
}

// Endpoint returns the endpoint client sends its requests to, "" for AWS.
func Endpoint(client *s3.Client) string { return aws.ToString(client.Options().BaseEndpoint) }
